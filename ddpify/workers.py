"""Jobs in worker processes (`-j N`): reports in input order, a dead worker reported as one
failed file rather than a traceback, and Ctrl-C stopping every worker at once.

Workers only prepare (read, migrate, compare); the calling process commits (cli.py), so that
every file written is reported, and a worker stopped mid-job has written nothing. Workers ignore
SIGINT: Ctrl-C reaches the whole process group, and it is the main process that decides.
"""
import signal
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from ddpify import jobs
from ddpify.jobs import ERROR, FAILED, Job, Report

CRASHED = ("the worker process migrating it died (a crash in libcst's native parser?): not "
           "migrated")


def reports(planned: Sequence[Job], workers: int) -> Iterator[Report]:
    """One prepared report per job, in order, for the caller to commit. When a worker dies,
    the job that was next in order runs again alone in a fresh worker, so the file that
    kills workers is the one reported."""
    position = 0
    while position < len(planned):
        remaining = planned[position:]
        try:
            for report in _in_pool(remaining, min(workers, len(remaining))):
                position += 1
                yield report
        except BrokenProcessPool:
            yield _alone(planned[position])
            position += 1


def _in_pool(planned: Sequence[Job], workers: int) -> Iterator[Report]:
    chunk = max(1, min(16, len(planned) // (workers * 4)))
    pool = ProcessPoolExecutor(max_workers=workers, initializer=_ignore_interrupts)
    finished = False
    try:
        yield from pool.map(jobs.prepare, planned, chunksize=chunk)
        finished = True
    finally:
        _close(pool, finished)


def _alone(job: Job) -> Report:
    pool = ProcessPoolExecutor(max_workers=1, initializer=_ignore_interrupts)
    try:
        return pool.submit(jobs.prepare, job).result()
    except BrokenProcessPool:
        return Report(job.shown, FAILED, ERROR, error=f"{job.shown}: {CRASHED}")
    finally:
        _close(pool, finished=False)


def _close(pool: ProcessPoolExecutor, finished: bool) -> None:
    """Wait for workers that are done; stop the others (Ctrl-C, a broken pool) at once."""
    if finished:
        pool.shutdown(wait=True)
        return
    processes = list((getattr(pool, "_processes", None) or {}).values())
    manager = getattr(pool, "_executor_manager_thread", None)
    results = getattr(pool, "_result_queue", None)
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(timeout=5)
    # A worker stopped while sending a result leaves half a message in the result pipe, and
    # the pool's manager thread waits for the rest forever (and the interpreter's exit waits
    # for that thread). With the workers gone, closing this process's own end of the pipe
    # gives the thread end-of-file: it takes the pool for broken and ends.
    writer = getattr(results, "_writer", None)
    if writer is not None:
        writer.close()
    # The manager thread closes its wake-up pipe as it ends. Left running, it races
    # concurrent.futures' exit hook, which writes to that pipe: "Bad file descriptor" and a
    # traceback after "interrupted" (CPython 3.11). Once it has ended, the hook skips it.
    if manager is not None:
        manager.join(timeout=5)


def _ignore_interrupts() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
