"""One interpreter with torch already imported; each plain-`python` run of a test is a fork of it.

Importing torch costs about 2.3 s of CPU here, and the fixture runs are mostly that: the
original and the migrated script, each a fresh `python script.py`, import it before doing a
second of work. A fork starts with torch imported (PyTorch's own DataLoader workers are forks
of a process that imported it). torchrun runs stay real torchrun runs (tests/script_runs.py).

Protocol, one JSON object per line: requests on stdin {"id", "script", "args", "cwd", "env",
"stdout", "stderr"}; on stdout, for each run that ended, {"id", "pid"} when it started and
{"id", "returncode"} when it ended. The server is single-threaded: forking a process with
other Python threads running is not safe.
"""
import importlib.util
import json
import os
import select
import sys

import torch  # noqa: F401  (the point of this process)

SERVER_PATH = list(sys.path[1:])  # without this file's own folder


def main() -> None:
    pending = {}
    buffer = b""
    stdin = sys.stdin.fileno()
    open_input = True
    while open_input or pending:
        if open_input:
            ready, _, _ = select.select([stdin], [], [], 0.02)
            if ready:
                chunk = os.read(stdin, 1 << 16)
                if not chunk:
                    open_input = False
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    request = json.loads(line)
                    pid = os.fork()
                    if pid == 0:
                        _run(request)  # never returns
                    pending[pid] = request["id"]
                    _reply({"id": request["id"], "pid": pid})
        else:
            select.select([], [], [], 0.02)
        while pending:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            _reply({"id": pending.pop(pid), "returncode": os.waitstatus_to_exitcode(status)})


def _reply(message: dict) -> None:
    os.write(sys.stdout.fileno(), (json.dumps(message) + "\n").encode())


def _run(request: dict) -> None:
    """In the child: become `python script args...` run in cwd with env, then exit."""
    code = 1
    try:
        os.setpgid(0, 0)  # a timeout kills the run and whatever it started
        os.chdir(request["cwd"])
        _redirect(os.open(os.devnull, os.O_RDONLY), 0)
        _redirect(os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 1)
        _redirect(os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 2)
        env = request["env"]
        os.environ.clear()
        os.environ.update(env)
        script = os.path.abspath(request["script"])
        extra = [part for part in env.get("PYTHONPATH", "").split(os.pathsep) if part]
        sys.path[:] = [os.path.dirname(script)] + extra + [p for p in SERVER_PATH if p not in extra]
        sys.argv = [os.path.basename(script), *request["args"]]
        import random
        random.seed()  # a fresh process draws its own seed
        code = _execute(script, extra)
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _execute(script: str, extra_path: list) -> int:
    import atexit
    import runpy
    import threading
    import traceback

    try:
        for folder in extra_path:  # what `site` would have imported at start-up
            if os.path.isfile(os.path.join(folder, "sitecustomize.py")):
                spec = importlib.util.spec_from_file_location(
                    "sitecustomize", os.path.join(folder, "sitecustomize.py"))
                module = importlib.util.module_from_spec(spec)
                sys.modules["sitecustomize"] = module
                spec.loader.exec_module(module)
                break
        runpy.run_path(script, run_name="__main__")
        code = 0
    except SystemExit as exit_:
        code = _exit_code(exit_.code)
    except BaseException:  # what the interpreter prints for an uncaught exception
        traceback.print_exc()
        code = 1
    # What interpreter exit does: wait for the script's threads, run its atexit handlers.
    threading._shutdown()
    atexit._run_exitfuncs()
    return code


def _exit_code(value) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    print(value, file=sys.stderr)
    return 1


def _redirect(fd: int, target: int) -> None:
    os.dup2(fd, target)
    os.close(fd)


if __name__ == "__main__":
    main()
