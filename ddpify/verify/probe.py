"""Run a training script unchanged while recording what it does, one event file per rank.

    python -m ddpify.verify.probe --record DIR [--full-epochs F] [--max-steps K]
        [--max-epochs E] [--dump-at UNIX_TIME] [--slow-writes S --slow-path P ...]
        [--import-only] script.py [script args...]

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
* files: ``torch.save`` (path, ``module.`` keys; a ``save`` event when it starts and a
  ``saved`` event when it is done), and every file
  opened for writing or reading, seen through an audit hook (``sys.addaudithook``'s
  ``open`` event), which also sees ``os.open``, logging's file handlers and libraries that
  kept their own reference to ``open``. Each carries the script line that caused it.
* ``.to()/.cuda()/.cpu()`` on a DDP wrapper or on the module it wraps, after the wrap;
  ``init_process_group``; every line written to ``sys.stdout``, with the script line that
  printed it; ``torch.manual_seed``.
* the end: the exit status, or the error with the script's line and frames, and the time,
  so that the rank that failed first (the cause) can be told from ranks that failed after.

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
import faulthandler
import hashlib
import io
import json
import os
import runpy
import sys
import threading
import time
import traceback
from collections.abc import Mapping
from typing import Any, List, Optional, Sequence

from ddpify.verify import records

ORIGINAL_OPEN = io.open
WRITE_MODE_LETTERS = set("wax+")
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
SYSTEM_PREFIXES = ("/dev/", "/proc/", "/sys/")
CODE_SUFFIXES = (".py", ".pyc", ".so")
# Reads of one path recorded at most this often: a dataset file read per sample is noise.
READS_PER_PATH = 20
IMPORT_RUN_NAME = "__ddpify_import__"
# Total seconds of delay the hand-off run may add, so a checkpoint per step cannot time out.
SLOW_WRITE_BUDGET_S = 20.0
MOVES = ("to", "cuda", "cpu")
# Frames of a failed rank's traceback kept for the report (the innermost ones).
TRACEBACK_FRAMES = 6


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
        # Batches this epoch may still yield (None: no limit).
        self.batch_limit: Optional[int] = None
        self.fetched = 0


def has_module_prefix(obj: Any, depth: int = 0) -> bool:
    """True when a state dict (or a dict of them, e.g. {"model": ...}) has `module.` keys."""
    if not isinstance(obj, Mapping):
        return False
    if any(isinstance(key, str) and key.startswith("module.") for key in obj):
        return True
    return depth < 3 and any(has_module_prefix(value, depth + 1) for value in obj.values())


def inside(path: str, directory: Optional[str]) -> bool:
    return bool(directory) and path.startswith(os.path.join(directory, ""))


def path_scope(path: str, run_dir: Optional[str] = None) -> str:
    """Where a file lies: the working directory ("cwd"), the run's own HOME and TMPDIR
    ("run"), a system directory, or anywhere else ("outside": shared with every run)."""
    absolute = os.path.abspath(path)
    if inside(absolute, os.getcwd()):
        return "cwd"
    if absolute.startswith(SYSTEM_PREFIXES):
        return "system"
    if inside(absolute, run_dir):
        return "run"
    return "outside"


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


def opens_for_writing(mode: Any, flags: Any) -> bool:
    if isinstance(mode, str):
        return bool(WRITE_MODE_LETTERS & set(mode))
    return isinstance(flags, int) and bool(flags & WRITE_FLAGS)


class Probe:
    def __init__(self, record_dir: str, max_steps: int = 0, max_epochs: int = 0, full_epochs: int = 0,
                 slow_writes: float = 0.0, slow_paths: Sequence[str] = (), script_dir: str = ""):
        self.record_dir = os.path.abspath(record_dir)
        self.run_dir = os.path.dirname(self.record_dir)
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
        self.last_loss: Optional[float] = None
        self.last_loader: Optional[LoaderState] = None
        self.loaders: dict = {}
        self.loader_by_index_sampler: dict = {}
        self.optimizer_ordinals: dict = {}
        self.reads: dict = {}
        self.in_hook = threading.local()
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
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(0)

    def where(self) -> Optional[str]:
        """The innermost line of the script's own files on the current stack, as file:line."""
        frame = sys._getframe(1)
        while frame is not None:
            name = frame.f_code.co_filename
            if own_file(name, self.script_dir):
                return f"{os.path.relpath(os.path.abspath(name), self.script_dir)}:{frame.f_lineno}"
            frame = frame.f_back
        return None

    # -- hooks -----------------------------------------------------------------------

    def install_hooks(self, torch) -> None:
        import torch.distributed as dist
        from torch import nn
        from torch.optim.optimizer import register_optimizer_step_post_hook
        from torch.utils.data import dataloader
        from torch.utils.data.distributed import DistributedSampler

        probe = self
        original_iter = dataloader.DataLoader.__iter__
        original_next_index = dataloader._BaseDataLoaderIter._next_index
        original_set_epoch = DistributedSampler.set_epoch
        original_backward = torch.Tensor.backward
        original_save = torch.save
        original_load = torch.load
        original_manual_seed = torch.manual_seed
        original_ddp_init = nn.parallel.DistributedDataParallel.__init__
        original_init_pg = dist.init_process_group

        def iter_hook(loader):
            probe.on_loader_iter(loader)
            return original_iter(loader)

        def next_index_hook(iterator):
            state = probe.loader_by_index_sampler.get(id(iterator._index_sampler))
            if state is not None and state.batch_limit is not None and state.fetched >= state.batch_limit:
                probe.recorder.emit("cut", loader=state.ordinal, epoch=state.epoch)
                raise StopIteration
            try:
                index = original_next_index(iterator)
            except StopIteration:
                if state is not None:
                    probe.recorder.emit("exhausted", loader=state.ordinal, epoch=state.epoch)
                raise
            if state is not None:
                state.fetched += 1
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
            # Recorded before it happens (a rank that is killed while rank 0 still writes
            # must leave the write behind as under way), and once more when it is done.
            path = target_path(f)
            probe.on_save(obj, path, probe.where(), time.time())
            if path is not None:
                probe.delay_write(path)
            probe.in_hook.active = True
            try:
                result = original_save(obj, f, *args, **kwargs)
            finally:
                probe.in_hook.active = False
            if path is not None:
                probe.recorder.emit("saved", abs=os.path.abspath(path), t_done=time.time())
            return result

        def load_hook(f, *args, **kwargs):
            path = target_path(f)
            where = probe.where()
            started = time.time()
            try:
                return original_load(f, *args, **kwargs)
            except Exception as error:
                if path is not None:
                    probe.recorder.emit("read", path=path, abs=os.path.abspath(path), where=where,
                                        t=started, error=f"{type(error).__name__}: {error}"[:300])
                raise

        def ddp_init_hook(wrapper, module, *args, **kwargs):
            original_ddp_init(wrapper, module, *args, **kwargs)
            module.__dict__["_ddpify_wrapped"] = True
            probe.recorder.emit("wrap", module=type(module).__name__, where=probe.where())

        def init_pg_hook(*args, **kwargs):
            probe.recorder.emit("init_pg", where=probe.where())
            result = original_init_pg(*args, **kwargs)
            # What the group runs on (nccl, gloo): the proof that a GPU run used NCCL.
            probe.recorder.emit("backend", name=str(dist.get_backend()))
            return result

        def move_hook(name, original):
            def move(module, *args, **kwargs):
                if module.__dict__.get("_ddpify_wrapped") or isinstance(
                        module, nn.parallel.DistributedDataParallel):
                    probe.recorder.emit("move_after_wrap", method=name, module=type(module).__name__,
                                        where=probe.where())
                return original(module, *args, **kwargs)

            move.__name__, move.__doc__ = name, original.__doc__
            return move

        dataloader.DataLoader.__iter__ = iter_hook
        dataloader._BaseDataLoaderIter._next_index = next_index_hook
        DistributedSampler.set_epoch = set_epoch_hook
        torch.Tensor.backward = backward_hook
        torch.save = torch.serialization.save = save_hook
        torch.load = torch.serialization.load = load_hook
        torch.manual_seed = torch.random.manual_seed = manual_seed_hook
        nn.parallel.DistributedDataParallel.__init__ = ddp_init_hook
        dist.init_process_group = init_pg_hook
        dist.distributed_c10d.init_process_group = init_pg_hook
        for name in MOVES:
            setattr(nn.Module, name, move_hook(name, getattr(nn.Module, name)))
        register_optimizer_step_post_hook(self.on_step)
        sys.addaudithook(self.on_audit)
        self.stdout = LineRecorder(sys.stdout,
                                   lambda line: self.recorder.emit("print", line=line, where=self.where()))
        sys.stdout = self.stdout

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

    def on_save(self, obj: Any, path: Optional[str], where: Optional[str], started: float) -> None:
        from torch import nn

        self.recorder.emit(
            "save",
            path=None if path is None else self.shown(path),
            abs=None if path is None else os.path.abspath(path),
            scope=None if path is None else path_scope(path, self.run_dir),
            module_prefix=has_module_prefix(obj),
            wrapped=isinstance(obj, (nn.parallel.DistributedDataParallel, nn.DataParallel)),
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
        self.recorder.emit("write", path=path, abs=absolute, mode=mode, scope=path_scope(path, self.run_dir),
                           where=self.where(), t=started, t_done=started)

    def on_read(self, path: str, absolute: str) -> None:
        count = self.reads.get(absolute, 0)
        if count >= READS_PER_PATH:
            return
        self.reads[absolute] = count + 1
        self.recorder.emit("read", path=self.shown(path), abs=absolute, where=self.where(), t=time.time())

    # -- running the script ----------------------------------------------------------

    def run(self, script: str, script_args: List[str], import_only: bool = False) -> None:
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


def target_path(target: Any) -> Optional[str]:
    if isinstance(target, (str, os.PathLike)):
        return os.fspath(target)
    name = getattr(target, "name", None)
    return name if isinstance(name, str) else None


def error_line(error: BaseException, script_dir: str) -> Optional[str]:
    """The innermost line of the script's own files in an exception's traceback."""
    found = None
    trace = error.__traceback__
    while trace is not None:
        name = trace.tb_frame.f_code.co_filename
        if own_file(name, script_dir):
            found = f"{os.path.relpath(os.path.abspath(name), script_dir)}:{trace.tb_lineno}"
        trace = trace.tb_next
    return found


def script_traceback(error: BaseException, script_dir: str) -> List[str]:
    """The traceback's frames in the script's own files, oldest first, and the frame that
    raised when it lies in a library: what a report shows as the cause of a failed rank
    (the whole traceback, torch's frames and the probe's included, is in the run's output)."""
    frames = traceback.extract_tb(error.__traceback__)
    shown = [frame for frame in frames if own_file(frame.filename, script_dir)]
    if frames and frames[-1] not in shown:
        shown.append(frames[-1])
    return [f"{describe_frame(frame, script_dir)}: {frame.line}" if frame.line else describe_frame(frame, script_dir)
            for frame in shown[-TRACEBACK_FRAMES:]]


def describe_frame(frame: traceback.FrameSummary, script_dir: str) -> str:
    path = frame.filename
    shown = os.path.relpath(os.path.abspath(path), script_dir) if own_file(path, script_dir) else \
        os.path.basename(path)
    return f"{shown}:{frame.lineno} in {frame.name}"


def own_file(code_filename: str, script_dir: str) -> bool:
    """Whether code comes from the user's files: `<frozen os>` and `<string>` name no file
    (and, taken as relative paths, would seem to lie in the working directory)."""
    return not code_filename.startswith("<") and inside(os.path.abspath(code_filename), script_dir)


def working_copy(script: str) -> str:
    """The folder whose files are the user's: the working directory verify runs the script
    from (a project's root), or the script's own folder when it lies elsewhere."""
    script = os.path.abspath(script)
    return os.getcwd() if inside(script, os.getcwd()) else os.path.dirname(script)


def parse_args(argv: List[str]) -> argparse.Namespace:
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


def main(argv: Optional[List[str]] = None) -> None:
    options = parse_args(sys.argv[1:] if argv is None else argv)
    os.makedirs(options.record, exist_ok=True)
    probe = Probe(options.record, options.max_steps, options.max_epochs, options.full_epochs,
                  options.slow_writes, options.slow_path, working_copy(options.script))
    probe.start(options.dump_at)
    probe.run(options.script, options.script_args, options.import_only)


if __name__ == "__main__":
    main()
