"""`python -m ddpify` and the `ddpify` command.

Ctrl-C while the command's modules are still loading (torch-free, but a second or more on a
busy machine) exits 130 without a traceback, as it does once the migration runs."""
import sys

INTERRUPTED = 130  # 128 + SIGINT, as shells report it (ddpify.cli.INTERRUPTED, not yet importable)


def run() -> None:
    try:
        from ddpify.cli import main
    except KeyboardInterrupt:
        sys.stderr.write("\nddpify: interrupted\n")
        sys.exit(INTERRUPTED)
    main()


if __name__ == "__main__":
    run()
