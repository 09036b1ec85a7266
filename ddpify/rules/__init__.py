"""The rule units, one module per family; CONCERNS is the order their plan steps run in.

Order matters: setup.choose makes the plan (where the setup block goes, which names the
others may use); each rule then writes its own part of the plan and reads only the parts
of rules before it; setup.place runs last because the block must precede every statement
that needs it. Units without a step of their own here (epochs, downloads, splits, epoch_cut,
schedule_length, hand_batches, random_batches) are steps of the data rule; loader_dicts runs just before it,
so that the loaders it takes over from a dict are its own. The registry of codes is
rules/registry.py.
"""
from ddpify.rules import (
    checkpoints,
    data,
    deferred_writes,
    devices,
    evaluation,
    gpu_count_batches,
    import_time_devices,
    in_batch,
    loader_dicts,
    loader_workers,
    machine_local,
    model,
    rank0_values,
    report_only,
    set_order,
    setup,
    shared_names,
    side_effects,
    training,
)

CONCERNS = (devices, import_time_devices, model, loader_workers, loader_dicts, data, evaluation, deferred_writes,
            side_effects, checkpoints, shared_names, training, in_batch, rank0_values, machine_local, report_only,
            gpu_count_batches, set_order)

__all__ = ["CONCERNS", "checkpoints", "data", "deferred_writes", "devices", "evaluation", "gpu_count_batches",
           "import_time_devices", "in_batch", "loader_dicts", "loader_workers", "machine_local", "model",
           "rank0_values", "report_only", "set_order", "setup", "shared_names", "side_effects", "training"]
