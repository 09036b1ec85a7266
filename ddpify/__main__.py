"""`python -m ddpify` and the `ddpify` command.

Ctrl-C while the command's modules are still loading (torch-free, but a second or more on a
busy machine) exits 130 without a traceback, as it does once the migration runs."""
import sys

from ddpify import interrupts


def run() -> None:
    try:
        with interrupts.deferred():
            from ddpify.cli import main
    except KeyboardInterrupt:
        sys.stderr.write("\nddpify: interrupted\n")
        sys.exit(interrupts.INTERRUPTED)
    main()


if __name__ == "__main__":
    run()
