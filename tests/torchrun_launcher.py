"""`torchrun ARGS` as a script the fork server can run (tests/fork_server.py).

It is torchrun itself, `torch.distributed.run.main`, started as a fork of an interpreter that
has imported torch already, which saves the launcher's 2.3 s of CPU per run. The ranks it
starts are what torchrun always starts: fresh interpreters running the script.
"""
import sys

from torch.distributed.run import main

if __name__ == "__main__":
    main(sys.argv[1:])
