"""What the probe reads off torch objects: parameter bytes for a step's digest, whether a
sampler shuffles, whether a saved state dict has the DDP wrapper's `module.` keys, what
tensors a checkpoint holds, and how FSDP2 split the parameters an optimizer steps.

torch is imported inside the functions: the probe starts before the script imports it.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def has_module_prefix(obj: Any, depth: int = 0) -> bool:
    """True when a state dict (or a dict of them, e.g. {"model": ...}) has `module.` keys."""
    if not isinstance(obj, Mapping):
        return False
    if any(isinstance(key, str) and key.startswith("module.") for key in obj):
        return True
    return depth < 3 and any(has_module_prefix(value, depth + 1) for value in obj.values())


def tensor_bytes(tensor) -> bytes:
    import torch

    flat = tensor.detach().reshape(-1).cpu().contiguous().view(torch.uint8)
    try:
        return flat.numpy().tobytes()
    except (ImportError, RuntimeError):
        return bytes(flat.tolist())


def sampler_shuffles(sampler) -> bool | None:
    name = type(sampler).__name__
    if name in ("RandomSampler", "SubsetRandomSampler", "WeightedRandomSampler"):
        return True
    if name == "SequentialSampler":
        return False
    shuffle = getattr(sampler, "shuffle", None)
    return shuffle if isinstance(shuffle, bool) else None


def sampler_replaces(sampler) -> bool:
    """Whether the sampler draws with replacement (a WeightedRandomSampler's default), itself
    or the sampler a wrapper shards (`DistributedSamplerWrapper(sampler)`): its epoch repeats
    some samples and misses others by design."""
    for candidate in (sampler, getattr(sampler, "sampler", None)):
        if getattr(candidate, "replacement", False) is True:
            return True
    return False


# A checkpoint's tensors are recorded by name up to this many (a huge model's file need not
# be listed whole to show that it is sharded or incomplete).
SAVED_TENSORS_LIMIT = 5000


def saved_tensors(obj: Any, prefix: str = "", found: dict | None = None) -> dict[str, list]:
    """{dotted key: [shape, kind]} for the tensors of what torch.save writes, at any depth of
    dicts, lists and tuples; kind is "DTensor" for an FSDP2 shard, else "Tensor". The
    optimizer's own `state` (keyed by index, or by name under FSDP2) is left out: only the
    model's tensors are compared with the original's."""
    import torch

    found = {} if found is None else found
    if isinstance(obj, Mapping) and {"state", "param_groups"} <= set(obj):
        return found
    items = obj.items() if isinstance(obj, Mapping) else enumerate(obj) if isinstance(obj, (list, tuple)) else ()
    for key, value in items:
        if len(found) >= SAVED_TENSORS_LIMIT:
            break
        path = f"{prefix}{key}"
        if isinstance(value, torch.Tensor):
            found[path] = [list(value.shape), "DTensor" if is_dtensor(value) else "Tensor"]
        elif isinstance(value, (Mapping, list, tuple)):
            saved_tensors(value, path + ".", found)
    return found


def is_dtensor(tensor: Any) -> bool:
    return type(tensor).__name__ == "DTensor" or type(getattr(tensor, "data", None)).__name__ == "DTensor"


def whole(param: Any) -> Any:
    """The full value of an FSDP2 shard (a collective), a plain tensor as it is."""
    return param.full_tensor() if is_dtensor(param) else param


def shard_figures(params: list, sharded_modules: list) -> dict[str, int]:
    """How the parameters an optimizer steps relate to the modules fully_shard was given:
    how many are DTensor shards, how many are parameters of those modules now (an optimizer
    built before fully_shard holds the replaced tensors), and this rank's numbers of them
    against the whole (a sharded parameter holds a fraction)."""
    module_params = {id(param) for module in sharded_modules for param in module.parameters()}
    shards = [param for param in params if is_dtensor(param)]
    return {
        "params": len(params),
        "dtensor_params": len(shards),
        "in_sharded_modules": sum(id(param) in module_params for param in params),
        "sharded_module_params": len(module_params),
        "local_numel": sum(param.to_local().numel() if is_dtensor(param) else param.numel() for param in params),
        "full_numel": sum(param.numel() for param in params),
    }
