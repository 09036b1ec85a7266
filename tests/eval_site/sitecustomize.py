"""Instrumentation for the evaluation check (tests/script_runs.py), loaded by `site` at start-up.

tests/script_runs.py puts this folder first on PYTHONPATH for the runs of a fixture whose
run.json has "evaluation". It does nothing unless DDPIFY_EVAL_CHECK names a log folder; then:

* every parameter keeps its initial value (and BatchNorm keeps its initial running
  statistics), so one process and two ranks, seeded alike, evaluate the same weights and must
  print the same evaluation figures;
* every fetch from a map-style dataset is logged to <log folder>/fetch-<rank>-<pid>.jsonl as
  {"rank", "key", "pass", "grad", "indices"}, so the check can tell whether the ranks'
  evaluation passes together cover the set exactly once.

Only DataLoaders with num_workers=0 are logged: with workers the fetches happen in other
processes, out of reach of the pass count kept here.
"""
import json
import os

LOG_DIR_VAR = "DDPIFY_EVAL_CHECK"


def _install(log_dir: str) -> None:
    # torch is imported here, before the script does, only when the check is on; the
    # launcher (torchrun) imports it anyway and the scripts under test import it first thing.
    import torch
    from torch.utils.data import DataLoader
    from torch.utils.data._utils import fetch

    _freeze_parameters(torch)
    _freeze_batchnorm_statistics(torch)
    _log_fetches(torch, DataLoader, fetch._MapDatasetFetcher, _FetchLog(log_dir))


def _freeze_parameters(torch) -> None:
    """Every optimizer step leaves the parameters as they were before it.

    The global hooks see every optimizer (SGD, Adam, Adadelta, ...) and let the step run, so
    optimizer state and LR schedulers behave as usual; only the parameters are put back.
    """
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    saved = {}

    def save(optimizer, args, kwargs):
        saved[id(optimizer)] = [(p, p.detach().clone()) for group in optimizer.param_groups
                                for p in group["params"]]

    def restore(optimizer, args, kwargs):
        with torch.no_grad():
            for parameter, before in saved.pop(id(optimizer), []):
                parameter.copy_(before)

    register_optimizer_step_pre_hook(save)
    register_optimizer_step_post_hook(restore)


def _freeze_batchnorm_statistics(torch) -> None:
    """BatchNorm's running statistics are buffers that training moves without an optimizer;
    with momentum 0 each update leaves them as they were, so evaluation sees initial statistics
    however the training batches were split across ranks."""
    from torch.nn.modules.batchnorm import _BatchNorm
    from torch.nn.modules.module import register_module_forward_pre_hook

    def hold_statistics(module, inputs):
        if isinstance(module, _BatchNorm) and module.training and module.track_running_stats:
            module.momentum = 0.0

    register_module_forward_pre_hook(hold_statistics)


class _FetchLog:
    """Appends one JSON line per fetch to this process's file in the log folder."""

    def __init__(self, log_dir: str):
        self.log_dir = log_dir
        self.rank = int(os.environ.get("RANK", 0))
        self.passes = {}

    def next_pass(self, key) -> int:
        """Passes are counted per dataset key in this process; ranks that run the same loops
        in the same order give the same pass number to the same loop's pass."""
        self.passes[key] = self.passes.get(key, 0) + 1
        return self.passes[key]

    def write(self, key, pass_number: int, grad: bool, indices) -> None:
        os.makedirs(self.log_dir, exist_ok=True)
        path = os.path.join(self.log_dir, f"fetch-{self.rank}-{os.getpid()}.jsonl")
        record = {"rank": self.rank, "key": list(key), "pass": pass_number, "grad": grad,
                  "indices": [_plain_index(index) for index in indices]}
        with open(path, "a") as log:
            log.write(json.dumps(record) + "\n")


def _dataset_key(dataset):
    try:
        length = len(dataset)
    except TypeError:
        length = None
    return type(dataset).__name__, length


def _plain_index(index):
    # Samplers hand out ints, but a list of tensors or numpy ints may stand in as sampler=.
    try:
        return int(index)
    except (TypeError, ValueError):
        return repr(index)


def _log_fetches(torch, DataLoader, MapDatasetFetcher, log: _FetchLog) -> None:
    """DataLoader.__iter__ tags the new iterator's fetcher with its pass; the fetcher logs.

    Only __iter__ and fetch are wrapped, and both return what the originals return, so len(),
    samplers (a range or a list as sampler= included) and batching are untouched.
    """
    original_iter = DataLoader.__iter__
    original_fetch = MapDatasetFetcher.fetch

    def __iter__(self):
        iterator = original_iter(self)
        fetcher = getattr(iterator, "_dataset_fetcher", None)
        if isinstance(fetcher, MapDatasetFetcher):
            key = _dataset_key(self.dataset)
            fetcher._ddpify_pass = (key, log.next_pass(key))
        return iterator

    def fetch(self, possibly_batched_index):
        tag = getattr(self, "_ddpify_pass", None)
        if tag is not None:
            indices = possibly_batched_index if self.auto_collation else [possibly_batched_index]
            log.write(tag[0], tag[1], torch.is_grad_enabled(), indices)
        return original_fetch(self, possibly_batched_index)

    DataLoader.__iter__ = __iter__
    MapDatasetFetcher.fetch = fetch


WRITES_LOG_VAR = "DDPIFY_WRITES_LOG"
# Audit events that write a file, and the argument that names it.
_WRITING_EVENTS = {"shutil.copyfile": 1, "os.rename": 1, "os.remove": 0, "ddpify.torch_save": 0}


def _log_writes(log_dir: str) -> None:
    """The one-writer check (tests/script_runs.py, problems_one_writer): every file of the run's
    folder that this rank opens for writing (`open(p, "w")`, torch.save, json.dump, savefig:
    they all open it), copies to, renames to or removes is logged to <log folder>/writes-<rank>-
    <pid>.log, one path a line, through an audit hook, which sees writes by any library."""
    import sys
    import threading

    rank = os.environ.get("RANK", "0")
    folder = os.getcwd()
    log_dir = os.path.abspath(log_dir)
    os.makedirs(log_dir, exist_ok=True)
    log_path = os.path.join(log_dir, f"writes-{rank}-{os.getpid()}.log")
    # The log exists from the start, empty when the process writes nothing: the check tells a
    # run that wrote no file from a run the shim never saw.
    open(log_path, "a").close()
    writing = threading.local()

    def written(event, args):
        if event == "open":
            path, mode, flags = args
            opens_to_write = any(letter in mode for letter in "wax+") if isinstance(mode, str) else (
                mode is None and isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
            return path if opens_to_write else None
        position = _WRITING_EVENTS.get(event)
        return None if position is None else args[position]

    def hook(event, args):
        if getattr(writing, "now", False):
            return
        path = written(event, args)
        if path is None or isinstance(path, int):
            return
        path = os.path.abspath(os.fsdecode(path))
        if not path.startswith(folder + os.sep) or path.startswith(log_dir):
            return  # the run's own files only: not torch's, not the logs of the checks
        writing.now = True
        try:
            with open(log_path, "a") as log:
                log.write(path + "\n")
        finally:
            writing.now = False

    sys.addaudithook(hook)
    _audit_torch_saves()


def _audit_torch_saves() -> None:
    """torch.save writes a path through its C++ zip writer, which Python's `open` event never
    sees: the call itself is announced."""
    import sys

    import torch

    original_save = torch.save

    def save(obj, f, *args, **kwargs):
        if isinstance(f, (str, bytes, os.PathLike)):
            sys.audit("ddpify.torch_save", f)
        return original_save(obj, f, *args, **kwargs)

    torch.save = save


if os.environ.get(WRITES_LOG_VAR):
    _log_writes(os.environ[WRITES_LOG_VAR])
if os.environ.get(LOG_DIR_VAR):
    _install(os.environ[LOG_DIR_VAR])
