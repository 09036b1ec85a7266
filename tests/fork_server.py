"""One interpreter with torch already imported; each plain-`python` run of a test is a fork of it.

Importing torch costs about 2.3 s of CPU here, and the fixture runs are mostly that: the
original and the migrated script, each a fresh `python script.py`, import it before doing a
second of work. A fork starts with torch imported (PyTorch's own DataLoader workers are forks
of a process that imported it). torchrun runs stay real torchrun runs (tests/script_runs.py).

Protocol, one JSON object per line: requests on stdin {"id", "script", "args", "cwd", "env",
"stdout", "stderr"}; on stdout, for each run that ended, {"id", "pid"} when it started and
{"id", "returncode"} when it ended. The server is single-threaded: forking a process with
other Python threads running is not safe.

torchrun's ranks come over a Unix socket (the path in DDPIFY_RANK_SOCKET): tests/rank_client.py,
the process torchrun starts for a rank, sends {"script", "args", "cwd", "env"} with its stdin,
stdout and stderr, and gets {"pid"} then {"returncode"} back. A client that goes away (killed
with its launcher at a test's timeout) takes its rank with it.
"""
import contextlib
import importlib.util
import json
import os
import select
import signal
import socket
import sys

import torch  # noqa: F401  (the point of this process)

# What nearly every run imports later, lazily, each time anew: the first optimizer built
# imports torch._dynamo (1.6 s of CPU here, as much again as torch itself), and DDP, the
# process group, the sampler and torchrun's launcher come with every migrated script.
# Importing them here leaves no thread behind (the server stays single-threaded; a test checks).
import torch._dynamo  # noqa: F401,E402
import torch.distributed.run  # noqa: F401,E402
import torch.nn.parallel  # noqa: F401,E402
import torch.optim  # noqa: F401,E402
import torch.utils.data.distributed  # noqa: F401,E402

SERVER_PATH = list(sys.path[1:])  # without this file's own folder


class _Server:
    """The runs the tests asked for on stdin (by id) and the ranks clients asked for."""

    def __init__(self) -> None:
        self.pending: dict[int, int] = {}  # pid -> the tests' request id
        self.ranks: dict[int, socket.socket] = {}  # rank pid -> its client's connection
        self.listener = _rank_listener()
        self.buffer = b""
        self.open_input = True

    def serve(self) -> None:
        stdin = sys.stdin.fileno()
        while self.open_input or self.pending or self.ranks:
            watched = [*([stdin] if self.open_input else []), *([self.listener] if self.listener else []),
                       *self.ranks.values()]
            ready, _, _ = select.select(watched, [], [], 0.02)
            if stdin in ready:
                self._read_requests(stdin)
            if self.listener is not None and self.listener in ready:
                self._start_rank()
            for pid, connection in list(self.ranks.items()):
                if connection in ready and not connection.recv(1):  # the client is gone
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            self._reap()

    def _read_requests(self, stdin: int) -> None:
        chunk = os.read(stdin, 1 << 16)
        if not chunk:
            self.open_input = False
        self.buffer += chunk
        while b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            request = json.loads(line)
            pid = os.fork()
            if pid == 0:
                _close_in_child(self.listener, self.ranks.values())
                _run(request)  # never returns
            self.pending[pid] = request["id"]
            _reply({"id": request["id"], "pid": pid})

    def _start_rank(self) -> None:
        assert self.listener is not None
        connection, _ = self.listener.accept()
        request, fds = _rank_request(connection)
        pid = os.fork()
        if pid == 0:
            _close_in_child(self.listener, [*self.ranks.values(), connection])
            _run(request, fds)  # never returns
        for fd in fds:
            os.close(fd)
        self.ranks[pid] = connection
        connection.sendall((json.dumps({"pid": pid}) + "\n").encode())

    def _reap(self) -> None:
        while self.pending or self.ranks:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                return
            code = os.waitstatus_to_exitcode(status)
            if pid in self.pending:
                _reply({"id": self.pending.pop(pid), "returncode": code})
            elif pid in self.ranks:
                connection = self.ranks.pop(pid)
                with contextlib.suppress(OSError):
                    connection.sendall((json.dumps({"returncode": code}) + "\n").encode())
                connection.close()


def main() -> None:
    _Server().serve()


def _close_in_child(listener, connections) -> None:
    """The server's sockets are not the child's: a rank's client must see its end close."""
    for each in [listener, *connections]:
        if each is not None:
            each.close()


def _rank_listener():
    path = os.environ.get("DDPIFY_RANK_SOCKET")
    if not path:
        return None
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    return listener


def _rank_request(connection: socket.socket) -> tuple[dict, list]:
    data, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
    while not data.endswith(b"\n"):
        more = connection.recv(1 << 20)
        if not more:
            break
        data += more
    return json.loads(data), list(fds)


def _reply(message: dict) -> None:
    os.write(sys.stdout.fileno(), (json.dumps(message) + "\n").encode())


def _run(request: dict, fds: list = ()) -> None:
    """In the child: become `python script args...` run in cwd with env, then exit. A rank
    (`fds`: its client's stdin, stdout and stderr) stays in the server's process group; a run
    of the tests' own goes into a group of its own, which a timeout kills whole."""
    code = 1
    try:
        if fds:
            for fd, target in zip(fds, (0, 1, 2)):
                _redirect(fd, target)
        else:
            os.setpgid(0, 0)  # a timeout kills the run and whatever it started
            _redirect(os.open(os.devnull, os.O_RDONLY), 0)
            _redirect(os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 1)
            _redirect(os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 2)
        os.chdir(request["cwd"])
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
        _run_as_main(script)
        code = 0
    except SystemExit as exit_:
        code = _exit_code(exit_.code)
    except BaseException:  # what the interpreter prints for an uncaught exception
        traceback.print_exc()
        code = 1
    # What interpreter exit does: wait for the script's threads, run its atexit handlers,
    # then flush what the script left open (finalization would close it).
    threading._shutdown()
    atexit._run_exitfuncs()
    _flush_open_files()
    return code


# The script's module, kept alive until the fork exits (os._exit, which runs no destructor).
# Destroying its globals while the interpreter runs on deadlocks now and then: a DDP model's
# Reducer frees its Gloo process group, whose destructor, holding the GIL, joins a worker
# thread that waits for the GIL to free the last work item (at real interpreter exit the same
# race aborts instead, pytorch/pytorch#179291, which the torchrun runs retry).
_MAIN: list = []


def _run_as_main(script: str) -> None:
    """`runpy.run_path(script, run_name="__main__")`, the same globals, with the module kept."""
    import io
    import types

    with io.open_code(script) as source:
        code = compile(source.read(), script, "exec", dont_inherit=True)
    module = types.ModuleType("__main__")
    module.__dict__.update(__file__=script, __cached__=None, __loader__=None, __package__="", __spec__=None)
    _MAIN.append(module)
    sys.modules["__main__"] = module
    exec(code, module.__dict__)


def _flush_open_files() -> None:
    import gc
    import io

    for thing in gc.get_objects():
        if isinstance(thing, io.IOBase):
            with contextlib.suppress(Exception):  # closed, detached, read-only: nothing to do
                thing.flush()


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
