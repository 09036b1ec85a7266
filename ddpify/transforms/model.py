"""DDP wrapping and reaching the raw model through `.module` (DDP101, DDP103, DDP903).

The wrap goes right after the last statement that builds, moves or loads the model before
its optimizer is created: DDP must see the model on its final device, and checkpoints
loaded before the wrap need no `.module`.
"""
from typing import Optional

import libcst as cst

from ddpify.analysis import Facts, Model, dotted_name
from ddpify.transforms.edits import Edits
from ddpify.transforms.setup import SetupPlan

WRAP_CODE = """\
if distributed:
    {model} = DDP({model}, device_ids=[local_rank] if {device}.type == "cuda" else None)
"""
# The same, split the way black splits a call that does not fit in 88 columns.
WRAP_CODE_SPLIT = """\
if distributed:
    {model} = DDP(
        {model}, device_ids=[local_rank] if {device}.type == "cuda" else None
    )
"""
LINE_LENGTH = 88


def plan(facts: Facts, edits: Edits, setup: SetupPlan) -> None:
    for model in facts.models:
        anchor = _wrap_anchor(facts, model)
        if anchor is None or not setup.sees_setup(facts, anchor):
            edits.report("DDP903", model.optimizer_statement,
                         f"could not find where `{model.name}` reaches its device: wrap it in DDP by hand")
            continue
        edits.after.setdefault(anchor, []).extend(
            edits.statements(_wrap_code(facts, anchor, model.name, setup.device))
        )
        edits.imports.add("DDP")
        edits.report("DDP101", anchor)
        _unwrap_state_dicts(facts, edits, model, anchor)


def _wrap_code(facts: Facts, anchor: cst.BaseStatement, model: str, device: str) -> str:
    code = WRAP_CODE.format(model=model, device=device)
    indent = facts.positions[anchor].start.column + 4
    if indent + max(len(line) for line in code.splitlines()) - 4 > LINE_LENGTH:
        code = WRAP_CODE_SPLIT.format(model=model, device=device)
    return code


def _wrap_anchor(facts: Facts, model: Model) -> Optional[cst.BaseStatement]:
    """The last statement before the optimizer, in its block, that assigns or moves the model."""
    block = facts.block_of(model.optimizer_statement)
    body = list(block.body)
    limit = body.index(model.optimizer_statement)
    anchor = None
    for statement in facts.statements_touching.get(model.name, ()):
        if facts.block_of(statement) is block and body.index(statement) < limit:
            anchor = statement if anchor is None or body.index(statement) > body.index(anchor) else anchor
    return anchor


def _unwrap_state_dicts(facts: Facts, edits: Edits, model: Model, wrap: cst.BaseStatement) -> None:
    """`model.state_dict()` after the wrap reads the raw module, whether wrapped or not."""
    for call in facts.state_dict_calls:
        if dotted_name(call.func.value) != model.name:
            continue
        same_function = facts.function_of(call) is facts.function_of(wrap)
        if same_function and facts.line_of(call) <= facts.line_of(wrap):
            continue
        edits.expressions[call.func.value] = _unwrapped(model.name, edits)
        edits.report("DDP103", call)


def _unwrapped(name: str, edits: Edits):
    return lambda _node: edits.expression(f'getattr({name}, "module", {name})')
