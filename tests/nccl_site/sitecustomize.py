"""Placement checks for a run on a CUDA machine (tests/nccl_runs.py), loaded by `site` at start-up.

Inert unless DDPIFY_NCCL_LOG names a file. Then each process appends JSON lines to it:

* `wrap`: every DistributedDataParallel built, with the devices of the module's parameters at
  that moment, the group's backend and the script line that built it. A wrap of a module whose
  parameters are on the CPU in a group with no CPU backend (NCCL alone) is the bug this check
  exists for: NCCL cannot reduce CPU tensors.
* `moved after wrap`: `.to()`/`.cuda()`/`.cpu()`/`.half()`... called on a DDP model or on the
  module it wraps after the wrap: the reducer keeps the old parameters, so gradients stop being
  synchronised without an error.
* `step`: the devices of the parameters the first optimizer step of each optimizer updates, so
  a script that trains on the CPU while a GPU is there is seen (the original and the migrated
  run are compared by tests/nccl_runs.py).
"""
import json
import os
import sys

LOG_VAR = "DDPIFY_NCCL_LOG"
MOVES = ("to", "cuda", "cpu", "half", "float", "double", "bfloat16", "to_empty")


def _caller() -> str:
    """The first frame outside torch and this file: the script line that made the call."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if "torch" not in name.split(os.sep) and name != __file__:
            return f"{os.path.basename(name)}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


def _install(log_path: str) -> None:
    import torch
    from torch.nn.parallel import DistributedDataParallel
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    rank = os.environ.get("RANK", "-")

    def log(kind: str, **fields) -> None:
        with open(log_path, "a") as out:
            out.write(json.dumps({"kind": kind, "rank": rank, "pid": os.getpid(), **fields}) + "\n")

    wrapped: dict[int, str] = {}  # id of a wrapped module (and of its wrapper) -> where it was wrapped
    original_init = DistributedDataParallel.__init__

    def init(self, module, *args, **kwargs):
        devices = sorted({str(p.device) for p in module.parameters()})
        where = _caller()
        group = kwargs.get("process_group")
        backend = str(torch.distributed.get_backend(group)) if torch.distributed.is_initialized() else None
        log("wrap", where=where, devices=devices, cuda=torch.cuda.is_available(), backend=backend,
            device_ids=str(kwargs.get("device_ids", args[0] if args else None)))
        original_init(self, module, *args, **kwargs)
        wrapped[id(self)] = wrapped[id(module)] = where

    DistributedDataParallel.__init__ = init

    def watch(method_name: str) -> None:
        original = getattr(torch.nn.Module, method_name)

        def moved(self, *args, **kwargs):
            if id(self) in wrapped:
                log("moved after wrap", where=_caller(), method=method_name, wrapped_at=wrapped[id(self)])
            return original(self, *args, **kwargs)

        setattr(torch.nn.Module, method_name, moved)

    for name in MOVES:
        watch(name)

    stepped: set[int] = set()

    def first_step(optimizer, args, kwargs) -> None:
        if id(optimizer) in stepped:
            return
        stepped.add(id(optimizer))
        devices = sorted({str(p.device) for group in optimizer.param_groups for p in group["params"]})
        log("step", where=_caller(), optimizer=type(optimizer).__name__, devices=devices)

    register_optimizer_step_pre_hook(first_step)


if os.environ.get(LOG_VAR):
    _install(os.environ[LOG_VAR])
