"""What the probe reads off torch objects: parameter bytes for a step's digest, whether a
sampler shuffles, whether a saved state dict has the DDP wrapper's `module.` keys.

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
