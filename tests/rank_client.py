"""One torchrun rank, run as a fork of the tests' torch-loaded server (tests/fork_server.py).

torchrun starts this (`--no-python python -S rank_client.py script args...`) as the rank's
process; it hands its stdin, stdout and stderr to the server over DDPIFY_RANK_SOCKET, the
server forks the rank with torchrun's environment and this process's working directory, and
this process waits for it: its exit status is the rank's, and the signals torchrun sends it
(SIGTERM when another rank failed) go on to the rank. Importing torch is most of a rank's
start here (2.3 s of CPU); the script itself runs exactly as under `python script args...`.
"""
import contextlib
import ctypes
import json
import os
import signal
import socket
import sys

PR_SET_PDEATHSIG = 1


def main() -> None:
    _die_with_the_launcher()
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(os.environ["DDPIFY_RANK_SOCKET"])
    request = {"script": os.path.abspath(sys.argv[1]), "args": sys.argv[2:], "cwd": os.getcwd(),
               "env": dict(os.environ)}
    socket.send_fds(connection, [json.dumps(request).encode() + b"\n"], [0, 1, 2])
    replies = connection.makefile("r")
    pid = json.loads(replies.readline())["pid"]

    def forward(signum, _frame) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(signum, forward)
    line = replies.readline()
    code = json.loads(line)["returncode"] if line else 1
    if code < 0:  # killed by a signal: end the same way, so that torchrun reports it so
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


def _die_with_the_launcher() -> None:
    """torchrun starts each rank in a session of its own, so a test's timeout, which kills the
    launcher's process group, would not reach this process: it dies with its parent instead,
    and the server, seeing its connection close, kills the rank."""
    parent = os.getppid()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the launcher died before that took hold
        os._exit(1)


if __name__ == "__main__":
    main()
