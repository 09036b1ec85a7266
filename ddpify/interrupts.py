"""Ctrl-C: the exit status it gives, and blocks it must not cut in half.

CPython 3.11 remembers a KeyboardInterrupt that escapes code run by `exec` or `eval` of a
string (`run_eval_code_obj`) and, at exit, kills the process with SIGINT whatever status it
was given: a Ctrl-C that lands while `dataclasses` builds a class's methods (an import of
libcst.matchers, of ddpify.api) exits -2, not 130, though ddpify caught it and said so. A
module half imported is no use to the run either. So imports wait for a Ctrl-C to be
raised until they are done (a fraction of a second), from here, outside any `exec`."""
import contextlib
import signal
import threading
from collections.abc import Iterator

INTERRUPTED = 130  # 128 + SIGINT, as shells report it


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Ctrl-C inside the block is raised when the block is done. Where Ctrl-C is ignored (a
    worker process: the main process decides) or cannot be handled (not the main thread),
    the block runs as it is."""
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        yield
        return
    interrupted: list[bool] = []
    previous = signal.signal(signal.SIGINT, lambda *_: interrupted.append(True))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if interrupted:
        raise KeyboardInterrupt
