"""The transforms, one module per concern, planned in a fixed order and applied in one pass.

Order matters: setup.choose decides where the setup block goes and which names the others
may use; setup.place runs last because the block must precede every statement that needs it.
"""
from ddpify.rules import (
    data,
    devices,
    evaluation,
    model,
    report_only,
    setup,
    shared_names,
    side_effects,
    training,
)

CONCERNS = (devices, model, data, evaluation, side_effects, shared_names, training, report_only)

__all__ = ["CONCERNS", "data", "devices", "evaluation", "model", "report_only", "setup", "shared_names",
           "side_effects", "training"]
