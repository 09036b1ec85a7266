"""Run a training script unchanged while recording what it does, one event file per rank.

    python -m ddpify.verify.probe --record DIR [--max-steps K] [--max-epochs E]
        [--dump-at UNIX_TIME] script.py [script args...]

The script is never edited: hooks are installed on torch and the builtins, then the script
runs with ``runpy.run_path(script, run_name="__main__")``. Under torchrun, pass the probe
with ``-m ddpify.verify.probe`` and every rank records into ``DIR/rank{RANK}.jsonl``.

What is recorded, and where the hook sits:

* samples: ``_BaseDataLoaderIter._next_index``, which runs in the main process and hands
  out the indices of each batch whatever ``num_workers`` is. With workers the indices are
  recorded when they are sent to a worker (prefetching runs ahead by
  ``prefetch_factor * num_workers`` batches), not when the batch arrives.
* epochs: the n-th ``iter()`` of a DataLoader is its epoch n. This does not rely on the
  script calling ``set_epoch`` (whose absence is one of the bugs to catch); ``set_epoch``
  calls are recorded separately as evidence.
* optimizer steps: ``register_optimizer_step_post_hook``; each step carries a float64 sum
  and a SHA-1 of the bytes of the optimizer's parameters, and the last scalar passed to
  ``Tensor.backward`` as the loss. The loader fetched from last before a step is marked as
  a training loader.
* ``torch.save`` (path, keys starting with ``module.``), ``open()`` for writing, every
  line written to ``sys.stdout``, and ``torch.manual_seed`` (an unseeded script cannot
  be compared with itself, let alone with its migration).

It stops the process with exit status 0 after ``--max-steps`` optimizer steps, or when a
training loader is about to start epoch ``--max-epochs``: every rank reaches the same
point, so all stop together without a collective. ``faulthandler`` dumps every thread's
stack into ``DIR/stack_rank{RANK}.txt`` if the process is still running at ``--dump-at``
(an absolute time, so the time torchrun takes to start the ranks does not shift it),
which is how a hang names the line it is stuck on.
"""
from __future__ import annotations

import argparse
import builtins
import faulthandler
import hashlib
import io
import json
import os
import runpy
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from typing import Any, List, Optional

from ddpify.verify import records

ORIGINAL_OPEN = builtins.open
WRITE_MODE_LETTERS = set("wax+")
SYSTEM_PREFIXES = ("/dev/", "/proc/", "/sys/")


class Recorder:
    """Appends one JSON line per event and flushes it, so a killed process loses nothing."""

    def __init__(self, path: str):
        self._file = ORIGINAL_OPEN(path, "a", encoding="utf-8", buffering=1)
        self._lock = threading.Lock()

    def emit(self, event: str, **fields: Any) -> None:
        line = json.dumps({"ev": event, **fields}, default=str)
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()


class LineRecorder:
    """Stands in for sys.stdout: passes everything through, records each complete line."""

    def __init__(self, stream, on_line):
        self._stream = stream
        self._on_line = on_line
        self._pending = ""

    def write(self, text):
        written = self._stream.write(text)
        if isinstance(text, str):
            *lines, self._pending = (self._pending + text).split("\n")
            for line in lines:
                self._on_line(line)
        return written

    def flush_pending(self):
        if self._pending:
            self._on_line(self._pending)
            self._pending = ""

    def __getattr__(self, name):
        return getattr(self._stream, name)


class LoaderState:
    def __init__(self, ordinal: int):
        self.ordinal = ordinal
        self.epoch = 0
        self.trains = False


def has_module_prefix(obj: Any, depth: int = 0) -> bool:
    """True when a state dict (or a dict of them, e.g. {"model": ...}) has `module.` keys."""
    if not isinstance(obj, Mapping):
        return False
    if any(isinstance(key, str) and key.startswith("module.") for key in obj):
        return True
    return depth < 3 and any(has_module_prefix(value, depth + 1) for value in obj.values())


def path_scope(path: str) -> str:
    """Where a written file lies: the working directory, a temp or system dir, or elsewhere."""
    absolute = os.path.abspath(path)
    if absolute.startswith(os.path.join(os.getcwd(), "")):
        return "cwd"
    if absolute.startswith(SYSTEM_PREFIXES):
        return "system"
    if absolute.startswith(os.path.join(tempfile.gettempdir(), "")):
        return "temp"
    return "other"


def tensor_bytes(tensor) -> bytes:
    import torch

    flat = tensor.detach().reshape(-1).cpu().contiguous().view(torch.uint8)
    try:
        return flat.numpy().tobytes()
    except (ImportError, RuntimeError):
        return bytes(flat.tolist())


def sampler_shuffles(sampler) -> Optional[bool]:
    name = type(sampler).__name__
    if name in ("RandomSampler", "SubsetRandomSampler", "WeightedRandomSampler"):
        return True
    if name == "SequentialSampler":
        return False
    shuffle = getattr(sampler, "shuffle", None)
    return shuffle if isinstance(shuffle, bool) else None


class Probe:
    def __init__(self, record_dir: str, max_steps: int, max_epochs: int):
        self.record_dir = os.path.abspath(record_dir)
        self.rank = int(os.environ.get("RANK", 0))
        self.recorder = Recorder(records.event_path(self.record_dir, self.rank))
        self.max_steps = max_steps
        self.max_epochs = max_epochs
        self.steps = 0
        self.last_loss: Optional[float] = None
        self.last_loader: Optional[LoaderState] = None
        self.loaders: dict = {}
        self.loader_by_index_sampler: dict = {}
        self.optimizer_ordinals: dict = {}
        # Strong references keep id() values from being reused by new objects.
        self.keep_alive: List[Any] = []
        self.stdout: Optional[LineRecorder] = None

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
        self.install_hooks(torch)

    def finish(self) -> None:
        faulthandler.cancel_dump_traceback_later()
        if self.stdout is not None:
            self.stdout.flush_pending()

    def stop(self, reason: str) -> None:
        """Ends the process cleanly: status 0, output flushed, no teardown to wait on."""
        self.recorder.emit("stop", reason=reason, steps=self.steps)
        self.finish()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(0)

    # -- hooks -----------------------------------------------------------------------

    def install_hooks(self, torch) -> None:
        from torch.optim.optimizer import register_optimizer_step_post_hook
        from torch.utils.data import dataloader
        from torch.utils.data.distributed import DistributedSampler

        probe = self
        original_iter = dataloader.DataLoader.__iter__
        original_next_index = dataloader._BaseDataLoaderIter._next_index
        original_set_epoch = DistributedSampler.set_epoch
        original_backward = torch.Tensor.backward
        original_save = torch.save
        original_manual_seed = torch.manual_seed

        def iter_hook(loader):
            probe.on_loader_iter(loader)
            return original_iter(loader)

        def next_index_hook(iterator):
            state = probe.loader_by_index_sampler.get(id(iterator._index_sampler))
            try:
                index = original_next_index(iterator)
            except StopIteration:
                if state is not None:
                    probe.recorder.emit("exhausted", loader=state.ordinal, epoch=state.epoch)
                raise
            if state is not None:
                probe.on_fetch(state, index)
            return index

        def set_epoch_hook(sampler, epoch):
            probe.recorder.emit("set_epoch", epoch=epoch)
            return original_set_epoch(sampler, epoch)

        def backward_hook(tensor, *args, **kwargs):
            if tensor.numel() == 1:
                probe.last_loss = float(tensor.detach())
            return original_backward(tensor, *args, **kwargs)

        def manual_seed_hook(seed):
            probe.recorder.emit("seed", value=int(seed))
            return original_manual_seed(seed)

        def save_hook(obj, f, *args, **kwargs):
            result = original_save(obj, f, *args, **kwargs)
            probe.on_save(obj, f)
            return result

        def open_hook(file, mode="r", *args, **kwargs):
            handle = ORIGINAL_OPEN(file, mode, *args, **kwargs)
            if isinstance(file, (str, bytes, os.PathLike)) and WRITE_MODE_LETTERS & set(mode):
                probe.on_write(file, mode)
            return handle

        dataloader.DataLoader.__iter__ = iter_hook
        dataloader._BaseDataLoaderIter._next_index = next_index_hook
        DistributedSampler.set_epoch = set_epoch_hook
        torch.Tensor.backward = backward_hook
        torch.save = torch.serialization.save = save_hook
        torch.manual_seed = torch.random.manual_seed = manual_seed_hook
        builtins.open = io.open = open_hook
        register_optimizer_step_post_hook(self.on_step)
        self.stdout = LineRecorder(sys.stdout, lambda line: self.recorder.emit("print", line=line))
        sys.stdout = self.stdout

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
            batch_size=loader.batch_size,
            drop_last=loader.drop_last,
            num_workers=loader.num_workers,
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
        digest = hashlib.sha1()
        with torch.no_grad():
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

    def on_save(self, obj: Any, target: Any) -> None:
        from torch import nn

        if isinstance(target, (str, os.PathLike)):
            path = os.fspath(target)
        else:
            name = getattr(target, "name", None)
            path = name if isinstance(name, str) else None
        self.recorder.emit(
            "save",
            path=path,
            scope=None if path is None else path_scope(path),
            module_prefix=has_module_prefix(obj),
            wrapped=isinstance(obj, (nn.parallel.DistributedDataParallel, nn.DataParallel)),
        )

    def on_write(self, file: Any, mode: str) -> None:
        path = os.fsdecode(file)
        if os.path.abspath(path).startswith(os.path.join(self.record_dir, "")):
            return
        self.recorder.emit("write", path=path, mode=mode, scope=path_scope(path))

    # -- running the script ----------------------------------------------------------

    def run(self, script: str, script_args: List[str]) -> None:
        sys.argv = [script, *script_args]
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            self.recorder.emit("end", status=status)
            self.finish()
            raise
        except BaseException as exc:
            self.recorder.emit("end", status="error", error=repr(exc)[:500])
            self.finish()
            raise
        self.recorder.emit("end", status=0)
        self.finish()


def parse_args(argv: List[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m ddpify.verify.probe")
    parser.add_argument("--record", required=True, help="directory for the event files")
    parser.add_argument("--max-steps", type=int, default=0, help="stop after K optimizer steps")
    parser.add_argument("--max-epochs", type=int, default=0, help="stop before epoch E")
    parser.add_argument("--dump-at", type=float, default=0, help="dump stacks at this Unix time")
    parser.add_argument("script")
    parser.add_argument("script_args", nargs=argparse.REMAINDER)
    return parser.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> None:
    options = parse_args(sys.argv[1:] if argv is None else argv)
    os.makedirs(options.record, exist_ok=True)
    probe = Probe(options.record, options.max_steps, options.max_epochs)
    probe.start(options.dump_at)
    probe.run(options.script, options.script_args)


if __name__ == "__main__":
    main()
