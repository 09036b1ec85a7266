"""The hooks the probe installs on torch and the builtins before the script runs.

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
* FSDP2: each module ``fully_shard`` is given (``torch.distributed.fsdp.fully_shard``), and
  at each optimizer's first step how its parameters relate to them (DTensor shards, this
  rank's numbers against the whole, still the modules' parameters or replaced ones); the
  step's digest is of the gathered parameters. ``torch.save`` also records the names,
  shapes and kinds (DTensor or not) of the model tensors it writes.
* the end: the exit status, or the error with the script's line and frames, and the time,
  so that the rank that failed first (the cause) can be told from ranks that failed after.
"""
from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, Any, Callable

from ddpify.verify.probing.paths import target_path
from ddpify.verify.probing.recorders import LineRecorder

if TYPE_CHECKING:
    from ddpify.verify.probe import Probe

MOVES = ("to", "cuda", "cpu")

# Where a hook goes: the owner, the attribute it replaces and the hook itself.
Replacement = tuple[object, str, Callable[..., Any]]


def install_hooks(probe: Probe) -> None:
    """Each hook calls the function it replaces unchanged: the script must run as it
    would without the probe, only observed."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    # Every hook is made, keeping its original, before the first one is installed.
    replacements = [*_loader_hooks(probe), *_training_hooks(probe), *_file_hooks(probe),
                    *_wrapping_hooks(probe), *_sharding_hooks(probe)]
    # setattr, not assignment: replacing torch's own methods is the point, and a type
    # checker rightly refuses `Class.method = function` everywhere else.
    for owner, attribute, replacement in replacements:
        setattr(owner, attribute, replacement)
    register_optimizer_step_post_hook(probe.on_step)
    sys.addaudithook(probe.on_audit)
    probe.stdout = LineRecorder(sys.stdout,
                               lambda line: probe.recorder.emit("print", line=line, where=probe.where()))
    sys.stdout = probe.stdout


def _loader_hooks(probe: Probe) -> list[Replacement]:
    """Epochs (the n-th iter() of a loader), the samples of each batch, the cut of later
    epochs to a batch limit, and set_epoch calls as evidence."""
    from torch.utils.data import dataloader
    from torch.utils.data.distributed import DistributedSampler

    original_iter = dataloader.DataLoader.__iter__
    original_next_index = dataloader._BaseDataLoaderIter._next_index
    original_set_epoch = DistributedSampler.set_epoch

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

    return [
        (dataloader.DataLoader, "__iter__", iter_hook),
        (dataloader._BaseDataLoaderIter, "_next_index", next_index_hook),
        (DistributedSampler, "set_epoch", set_epoch_hook),
    ]


def _training_hooks(probe: Probe) -> list[Replacement]:
    """The loss each optimizer step carries, and the seeds the script sets."""
    import torch

    original_backward = torch.Tensor.backward
    original_manual_seed = torch.manual_seed

    def backward_hook(tensor, *args, **kwargs):
        if tensor.numel() == 1:
            probe.last_loss = float(tensor.detach())
        return original_backward(tensor, *args, **kwargs)

    def manual_seed_hook(seed):
        probe.recorder.emit("seed", value=int(seed))
        return original_manual_seed(seed)

    return [
        (torch.Tensor, "backward", backward_hook),
        (torch, "manual_seed", manual_seed_hook),
        (torch.random, "manual_seed", manual_seed_hook),
    ]


def _file_hooks(probe: Probe) -> list[Replacement]:
    """torch.save and torch.load, under both names a script may call them by; the audit
    hook sees every other file."""
    import torch

    original_save = torch.save
    original_load = torch.load

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

    return [
        (torch, "save", save_hook),
        (torch.serialization, "save", save_hook),
        (torch, "load", load_hook),
        (torch.serialization, "load", load_hook),
    ]


def _wrapping_hooks(probe: Probe) -> list[Replacement]:
    """init_process_group and the backend it chose, the DDP wrap, and any .to()/.cuda()/
    .cpu() of the model after it: on a GPU that moves parameters out from under DDP's
    gradient buckets, on the CPU nothing shows it but this record."""
    import torch.distributed as dist
    from torch import nn

    original_ddp_init = nn.parallel.DistributedDataParallel.__init__
    original_init_pg = dist.init_process_group

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

    return [
        (nn.parallel.DistributedDataParallel, "__init__", ddp_init_hook),
        (dist, "init_process_group", init_pg_hook),
        (dist.distributed_c10d, "init_process_group", init_pg_hook),
        *((nn.Module, name, move_hook(name, getattr(nn.Module, name))) for name in MOVES),
    ]


def _sharding_hooks(probe: Probe) -> list[Replacement]:
    """FSDP2's fully_shard, as `from torch.distributed.fsdp import fully_shard` finds it: the
    modules it shards (the root last), for the sharding checks."""
    import functools

    from torch.distributed import fsdp

    original_fully_shard = fsdp.fully_shard

    @functools.wraps(original_fully_shard)
    def fully_shard_hook(module, *args, **kwargs):
        result = original_fully_shard(module, *args, **kwargs)
        probe.on_shard(module)
        return result

    return [(fsdp, "fully_shard", fully_shard_hook)]
