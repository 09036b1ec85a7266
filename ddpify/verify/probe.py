"""Run a training script unchanged while recording what it does, one event file per rank.

    python -m ddpify.verify.probe --record DIR [--full-epochs F] [--max-steps K]
        [--max-epochs E] [--dump-at UNIX_TIME] [--slow-writes S --slow-path P ...]
        [--import-only] script.py [script args...]

The script is never edited: hooks are installed on torch and the builtins, then the script
runs with ``runpy.run_path(script, run_name="__main__")``. Under torchrun, pass the probe
with ``-m ddpify.verify.probe`` and every rank records into ``DIR/rank{RANK}.jsonl``.
What is recorded, and where each hook sits, is told in ddpify/verify/probing/hooks.py;
the Probe here holds a run's state and turns what the hooks see into events.

Cutting a run short, so that the code after training still runs: after ``--full-epochs``
epochs of a training loader, every later epoch of every loader yields one batch per rank
(the loader's iterator ends early; the script's own loop and control flow are unchanged).
``--max-steps`` and ``--max-epochs`` are hard caps for long scripts: the process stops with
exit status 0 after K optimizer steps, or when a training loader is about to start epoch E,
and records a ``stop`` event saying so; every rank reaches the same point, so all stop
together without a collective. ``faulthandler`` dumps every thread's stack into
``DIR/stack_rank{RANK}.txt`` if the process is still running at ``--dump-at`` (an absolute
time, so the time torchrun takes to start the ranks does not shift it), which is how a hang
names the line it is stuck on.

``--slow-writes S`` delays rank 0's writes to the ``--slow-path`` files by S seconds each
(the hand-off run): a rank that reads what rank 0 writes without waiting for it then reads
too early. ``--import-only`` imports the script as a module instead of running it.
"""
from __future__ import annotations

import argparse
import contextlib
import faulthandler
import hashlib
import os
import runpy
import sys
import threading
import time
from collections.abc import Sequence
from types import FrameType
from typing import Any

from ddpify.verify import records
from ddpify.verify.probing.hooks import install_hooks
from ddpify.verify.probing.paths import (
    CODE_SUFFIXES,
    SYSTEM_PREFIXES,
    inside,
    opens_for_writing,
    own_file,
    path_scope,
    working_copy,
)
from ddpify.verify.probing.recorders import ORIGINAL_OPEN, LineRecorder, Recorder
from ddpify.verify.probing.torch_objects import (
    has_module_prefix,
    sampler_replaces,
    sampler_shuffles,
    saved_tensors,
    shard_figures,
    tensor_bytes,
    whole,
)
from ddpify.verify.probing.tracebacks import error_line, script_traceback

# Reads of one path recorded at most this often: a dataset file read per sample is noise.
READS_PER_PATH = 20
IMPORT_RUN_NAME = "__ddpify_import__"
# Total seconds of delay the hand-off run may add, so a checkpoint per step cannot time out.
SLOW_WRITE_BUDGET_S = 20.0


class LoaderState:
    def __init__(self, ordinal: int):
        self.ordinal = ordinal
        self.epoch = 0
        self.trains = False
        # Batches this epoch may still yield (None: no limit).
        self.batch_limit: int | None = None
        self.fetched = 0


class Probe:
    def __init__(self, record_dir: str, max_steps: int = 0, max_epochs: int = 0, full_epochs: int = 0,
                 slow_writes: float = 0.0, slow_paths: Sequence[str] = (), script_dir: str = ""):
        self.record_dir = os.path.abspath(record_dir)
        self.run_dir = os.path.dirname(self.record_dir)
        # The run's own directories: its folder, and the short TMPDIR outside it that a run
        # whose folder's path is too long for a Unix socket gets (runner.scratch_directory).
        self.run_dirs = (self.run_dir, os.environ.get(records.SCRATCH_ENV))
        # The working copy: every frame in a file under it is the user's code.
        self.script_dir = os.path.abspath(script_dir or os.getcwd())
        self.rank = int(os.environ.get("RANK", 0))
        self.recorder = Recorder(records.event_path(self.record_dir, self.rank))
        self.max_steps = max_steps
        self.max_epochs = max_epochs
        self.full_epochs = full_epochs
        self.cutting = False
        self.slow_writes = slow_writes if self.rank == 0 else 0.0
        self.slow_paths = {os.path.abspath(path) for path in slow_paths}
        self.delay_left = SLOW_WRITE_BUDGET_S
        self.steps = 0
        self.last_loss: float | None = None
        self.last_loader: LoaderState | None = None
        self.loaders: dict = {}
        self.loader_by_index_sampler: dict = {}
        self.optimizer_ordinals: dict = {}
        self.reads: dict = {}
        self.in_hook = threading.local()
        # Strong references keep id() values from being reused by new objects.
        self.keep_alive: list[Any] = []
        self.stdout: LineRecorder | None = None
        # Modules handed to FSDP2's fully_shard, in order (the root comes last), and the
        # optimizers whose parameters were described at their first step.
        self.sharded_modules: list[Any] = []
        self.optimizers_described: set[int] = set()

    # -- lifecycle -------------------------------------------------------------------

    def start(self, dump_at: float) -> None:
        stack_file = ORIGINAL_OPEN(records.stack_path(self.record_dir, self.rank), "w")
        self.keep_alive.append(stack_file)
        if dump_at > 0:
            delay = max(0.1, dump_at - time.time())
            faulthandler.dump_traceback_later(delay, exit=False, file=stack_file)
        import torch

        self.recorder.emit(
            "start",
            rank=self.rank,
            local_rank=int(os.environ.get("LOCAL_RANK", 0)),
            world_size=int(os.environ.get("WORLD_SIZE", 1)),
            pid=os.getpid(),
            cuda_devices=torch.cuda.device_count(),
        )
        install_hooks(self)

    def finish(self) -> None:
        faulthandler.cancel_dump_traceback_later()
        if self.stdout is not None:
            self.stdout.flush_pending()

    def stop(self, reason: str) -> None:
        """Ends the process cleanly: status 0, output flushed, no teardown to wait on.

        os._exit skips the DataLoader's own shutdown of its worker processes, so they are
        stopped here rather than left to notice, seconds later, that their parent is gone."""
        self.recorder.emit("stop", reason=reason, steps=self.steps)
        self.finish()
        import multiprocessing

        for child in multiprocessing.active_children():
            child.terminate()
            child.join(timeout=2)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(0)

    def where(self) -> str | None:
        """The innermost line of the script's own files on the current stack, as file:line."""
        frame: FrameType | None = sys._getframe(1)
        while frame is not None:
            name = frame.f_code.co_filename
            if own_file(name, self.script_dir):
                return f"{os.path.relpath(os.path.abspath(name), self.script_dir)}:{frame.f_lineno}"
            frame = frame.f_back
        return None

    # -- what the hooks report -------------------------------------------------------

    def on_audit(self, event: str, args: tuple) -> None:
        if event != "open" or getattr(self.in_hook, "active", False):
            return
        file, mode, flags = args
        if not isinstance(file, (str, bytes, os.PathLike)):
            return
        self.in_hook.active = True
        try:
            path = os.fsdecode(file)
            absolute = os.path.abspath(path)
            if inside(absolute, self.record_dir):
                return
            if opens_for_writing(mode, flags):
                self.on_write(path, absolute, mode if isinstance(mode, str) else f"flags={flags:#o}")
            elif not absolute.endswith(CODE_SUFFIXES) and not absolute.startswith(SYSTEM_PREFIXES):
                self.on_read(path, absolute)
        finally:
            self.in_hook.active = False

    def delay_write(self, path: str) -> None:
        if self.slow_writes and os.path.abspath(path) in self.slow_paths and self.delay_left > 0:
            delay = min(self.slow_writes, self.delay_left)
            self.delay_left -= delay
            time.sleep(delay)

    def on_loader_iter(self, loader) -> None:
        from torch.utils.data import IterableDataset

        state = self.loaders.get(id(loader))
        if state is None:
            state = self.loaders[id(loader)] = LoaderState(len(self.loaders))
            self.keep_alive.append(loader)
        else:
            state.epoch += 1
        if state.trains and self.max_epochs and state.epoch >= self.max_epochs:
            self.stop("max_epochs")
        if state.trains and self.full_epochs and state.epoch >= self.full_epochs:
            self.cutting = True
        state.fetched = 0
        state.batch_limit = 1 if self.cutting else None
        self.loader_by_index_sampler[id(loader._index_sampler)] = state
        map_style = not isinstance(loader.dataset, IterableDataset)
        self.recorder.emit(
            "iter",
            loader=state.ordinal,
            epoch=state.epoch,
            map_style=map_style,
            dataset_len=len(loader.dataset) if map_style and hasattr(loader.dataset, "__len__") else None,
            sampler=type(loader.sampler).__name__,
            shuffle=sampler_shuffles(loader.sampler),
            replacement=sampler_replaces(loader.sampler),
            batch_size=loader.batch_size,
            drop_last=loader.drop_last,
            num_workers=loader.num_workers,
            cut=self.cutting,
        )

    def on_fetch(self, state: LoaderState, index: Any) -> None:
        self.last_loader = state
        if index is None:  # IterableDataset: nothing to index
            return
        indices = list(index) if isinstance(index, (list, tuple)) else [index]
        self.recorder.emit("fetch", loader=state.ordinal, epoch=state.epoch, indices=indices)

    def on_step(self, optimizer, args, kwargs) -> None:
        import torch

        self.steps += 1
        if id(optimizer) not in self.optimizer_ordinals:
            self.optimizer_ordinals[id(optimizer)] = len(self.optimizer_ordinals)
            self.keep_alive.append(optimizer)
        params = [p for group in optimizer.param_groups for p in group["params"]]
        if self.optimizer_ordinals[id(optimizer)] not in self.optimizers_described:
            self.optimizers_described.add(self.optimizer_ordinals[id(optimizer)])
            self.recorder.emit("shards", optimizer=self.optimizer_ordinals[id(optimizer)],
                               **shard_figures(params, self.sharded_modules))
        digest = hashlib.sha1()
        with torch.no_grad():
            # FSDP2: each rank holds a shard of each parameter; the digest is of the whole
            # (gathered on every rank: each steps the same optimizer at the same point).
            params = [whole(param) for param in params]
            checksum = sum(float(p.detach().double().sum()) for p in params)
            for param in params:
                digest.update(tensor_bytes(param))
        if self.last_loader is not None:
            self.last_loader.trains = True
        self.recorder.emit(
            "step",
            n=self.steps,
            optimizer=self.optimizer_ordinals[id(optimizer)],
            loader=None if self.last_loader is None else self.last_loader.ordinal,
            checksum=checksum,
            digest=digest.hexdigest(),
            loss=self.last_loss,
        )
        if self.max_steps and self.steps >= self.max_steps:
            self.stop("max_steps")

    def on_shard(self, module: Any) -> None:
        self.sharded_modules.append(module)
        self.keep_alive.append(module)
        self.recorder.emit("shard", module=type(module).__name__.removeprefix("FSDP"), where=self.where())

    def on_save(self, obj: Any, path: str | None, where: str | None, started: float) -> None:
        from torch import nn

        self.recorder.emit(
            "save",
            path=None if path is None else self.shown(path),
            abs=None if path is None else os.path.abspath(path),
            scope=None if path is None else path_scope(path, self.run_dirs),
            module_prefix=has_module_prefix(obj),
            wrapped=isinstance(obj, (nn.parallel.DistributedDataParallel, nn.DataParallel)),
            tensors=saved_tensors(obj),
            where=where,
            t=started,
        )

    def shown(self, path: str) -> str:
        """A path as the user's script would name it: relative when it is in the working copy."""
        absolute = os.path.abspath(path)
        return os.path.relpath(absolute) if inside(absolute, os.getcwd()) else path

    def on_write(self, path: str, absolute: str, mode: str) -> None:
        path = self.shown(path)
        self.delay_write(path)
        started = time.time()
        self.recorder.emit("write", path=path, abs=absolute, mode=mode, scope=path_scope(path, self.run_dirs),
                           where=self.where(), t=started, t_done=started)

    def on_read(self, path: str, absolute: str) -> None:
        count = self.reads.get(absolute, 0)
        if count >= READS_PER_PATH:
            return
        self.reads[absolute] = count + 1
        self.recorder.emit("read", path=self.shown(path), abs=absolute, where=self.where(), t=time.time())

    # -- running the script ----------------------------------------------------------

    def run(self, script: str, script_args: list[str], import_only: bool = False) -> None:
        sys.argv = [script, *script_args]
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        try:
            runpy.run_path(script, run_name=IMPORT_RUN_NAME if import_only else "__main__")
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            self.recorder.emit("end", status=status, t=time.time())
            self.finish()
            raise
        except BaseException as exc:
            # `t` orders the ranks' failures: the first one is the cause, the others followed.
            self.recorder.emit("end", status="error", error=f"{type(exc).__name__}: {exc}"[:500],
                               where=error_line(exc, self.script_dir), t=time.time(),
                               traceback=script_traceback(exc, self.script_dir))
            self.finish()
            raise
        self.recorder.emit("end", status=0, t=time.time())
        self.finish()


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m ddpify.verify.probe")
    parser.add_argument("--record", required=True, help="directory for the event files")
    parser.add_argument("--max-steps", type=int, default=0, help="stop after K optimizer steps")
    parser.add_argument("--max-epochs", type=int, default=0, help="stop before epoch E")
    parser.add_argument("--full-epochs", type=int, default=0,
                        help="epochs at full length; later ones yield one batch per loader")
    parser.add_argument("--dump-at", type=float, default=0, help="dump stacks at this Unix time")
    parser.add_argument("--slow-writes", type=float, default=0, help="rank 0 delays writes by S seconds")
    parser.add_argument("--slow-path", action="append", default=[], help="a file whose writes are delayed")
    parser.add_argument("--import-only", action="store_true", help="import the script, do not run it")
    parser.add_argument("script")
    parser.add_argument("script_args", nargs=argparse.REMAINDER)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    options = parse_args(sys.argv[1:] if argv is None else argv)
    os.makedirs(options.record, exist_ok=True)
    probe = Probe(options.record, options.max_steps, options.max_epochs, options.full_epochs,
                  options.slow_writes, options.slow_path, working_copy(options.script))
    probe.start(options.dump_at)
    probe.run(options.script, options.script_args, options.import_only)


if __name__ == "__main__":
    main()
