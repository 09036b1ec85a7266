"""Copies of the model made before its wrap start from rank 0's weights (DDP133).

Rule (DESIGN §2.3, §2.9): every module whose weights are taken from a wrapped model's before
the wrap (`ema = copy.deepcopy(model)`, `AveragedModel(model)`, an EMA class or helper that
deep-copies what it is handed, `target_net.load_state_dict(policy_net.state_dict())`) holds
this rank's own initial weights: DDP's wrap broadcasts rank 0's to the model only. In a script
without a seed the EMA, teacher or target network then differs on every rank for the whole run,
at exit 0. A copy made after the wrap is already a copy of the module (model.py, DDP103); one
made before it stays where the user wrote it, with its type, and its parameters and buffers are
broadcast from rank 0 once both the wrap and the copy's own moves have run, before the training.
Where that point cannot be found (the copy reaches its device only inside the training, or never
leaves the CPU, which NCCL cannot broadcast), nothing is added and the self-check refuses the
output (DDP951).
"""
from collections.abc import Callable, Iterable
from typing import Optional, cast

import libcst as cst

from ddpify.analysis.control import Facts, innermost_common_block
from ddpify.analysis.facts import Model, Statement
from ddpify.analysis.nodes import dotted_name
from ddpify.diagnostics import Rule, Severity
from ddpify.emit.edits import Edits
from ddpify.plan import Plan
from ddpify.rules.cases import Emits, Silent

RULES = (
    Rule("DDP133", Severity.EDIT, "a copy of the model made before its wrap starts from rank 0's weights",
         "`ema = copy.deepcopy(model)` (an AveragedModel, a teacher, a target network loaded from the "
         "model's state dict) made before the wrap holds this rank's own initial weights; the wrap "
         "broadcasts rank 0's to the model only, so without a seed the copy differs on every rank for "
         "the whole run. Its parameters and buffers are broadcast from rank 0 after the wrap and the "
         "copy's own moves, before the training; the copy stays where it is made.",
         "Nothing to do."),
)

# Calls whose result is a module copied from the one they are handed.
_MODULE_COPIES = frozenset({"deepcopy", "ModelEmaV2", "ModelEmaV3"})

SYNC_CODE = """\
if {condition}:
    # Made from `{model}` before its wrap, `{copy}` holds this rank's own weights: take rank 0's.
    for tensor in [*{copy}.parameters(), *{copy}.buffers()]:
        dist.broadcast(tensor.detach(), src=0)
"""


def sync_copies_made_before_the_wrap(facts: Facts, edits: Edits, setup: Plan, model: Model, wrap: Statement,
                                     derivations: Callable[[str], list[cst.Call]],
                                     training: Optional[cst.CSTNode]) -> None:
    """Each copy of `model` made before `wrap` (in the wrap's function) is broadcast from rank 0
    where it sits on its device, after the wrap. `derivations(name)`: the calls that copy the
    module `name` holds (model.py); `training`: where the model starts to train, or None."""
    for copy, made in _copies_before(facts, model, wrap, derivations):
        point = _sync_point(facts, model, copy, made, wrap, training)
        if point is None:
            continue  # the self-check refuses it (DDP951): no place sees the copy on its device
        condition = "distributed" if setup.sees_setup(facts, point) else "dist.is_initialized()"
        if facts.ancestor_in(made, cast(cst.CSTNode, facts.parents.get(point))) is not made:
            # `if args.ema: ema = deepcopy(model)` after `ema = None`: only where it was made.
            if not _bound_before_in_its_block(facts, copy, point, made):
                continue
            condition += f" and {copy} is not None"
        code = SYNC_CODE.format(condition=condition, copy=copy, model=model.name)
        edits.insert_after(point, edits.statements(code))
        edits.imports.add("dist")
        edits.report("DDP133", made)


def _sources(facts: Facts, model: Model, function: Optional[cst.FunctionDef]) -> set[str]:
    """The names that hold the model's value in the wrap's function: its own, and the names
    it is bound from there (`self.model = model` in a Trainer's __init__)."""
    sources = {model.name}
    for statement in facts.statements_touching.get(model.name, ()):
        if facts.function_of(statement) is not function or not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if isinstance(small, cst.Assign) and len(small.targets) == 1 \
                    and dotted_name(small.targets[0].target) == model.name and isinstance(small.value, cst.Name):
                sources.add(small.value.value)
    return sources


def _copies_before(facts: Facts, model: Model, wrap: Statement,
                   derivations: Callable[[str], list[cst.Call]]) -> list[tuple[str, Statement]]:
    """(name of the copy, statement that makes it) for each copy made before the wrap."""
    function = facts.function_of(wrap)
    found: list[tuple[str, Statement]] = []
    for source in sorted(_sources(facts, model, function)):
        for call in [*derivations(source), *_state_loads_from(facts, source), *_project_copies_of(facts, source)]:
            made = facts.statement_of(call)
            if facts.function_of(made) is not function or facts.end_of(made) > facts.end_of(wrap):
                continue
            copy = _copy_name(facts, call)
            if copy is not None and copy not in (model.name, source) and all(copy != name for name, _ in found):
                found.append((copy, made))
    return found


def _project_copies_of(facts: Facts, source: str) -> Iterable[cst.Call]:
    """`ema = ModelEMA(model)` of a class or function another module of the project defines."""
    for call in facts.project_calls:
        if (dotted_name(call.func) or "") in facts.project_copies and call.args \
                and call.args[0].keyword is None and dotted_name(call.args[0].value) == source:
            yield call


def _state_loads_from(facts: Facts, source: str) -> Iterable[cst.Call]:
    """`other.load_state_dict(source.state_dict())`: the load call."""
    for read in facts.attribute_reads.get(source, ()):
        if read.attr.value != "state_dict":
            continue
        called = facts.parents.get(read)
        argument = facts.parents.get(called) if isinstance(called, cst.Call) else None
        load = facts.parents.get(argument) if isinstance(argument, cst.Arg) else None
        if isinstance(load, cst.Call) and isinstance(load.func, cst.Attribute) \
                and load.func.attr.value == "load_state_dict" and load.args and load.args[0] is argument:
            yield load


def _copy_name(facts: Facts, call: cst.Call) -> Optional[str]:
    """The name of the module the copy is: the receiver of a load (`target.load_state_dict(...)`);
    the single target of `ema = deepcopy(model)` (`.eval()` chained on), of a module class or a
    function of this file that deep-copies what it is handed, or, for a plain class of this file
    that keeps its copy as `self.shadow`, `ema.shadow`; timm's ModelEmaV2 and V3 are modules.
    None for the rest: torch's AveragedModel copies the model's weights at its first update, and
    an EMA class from elsewhere may hold its copy anywhere."""
    if isinstance(call.func, cst.Attribute) and call.func.attr.value == "load_state_dict":
        return dotted_name(call.func.value)
    target = _bound_to(facts, call)
    callee = dotted_name(call.func) or ""
    if target is None or callee.rsplit(".", 1)[-1] in _MODULE_COPIES or callee in facts.module_classes:
        return target
    if callee in facts.project_copies:
        held = facts.project_copies[callee]
        return f"{target}.{held}" if held else target
    if callee in facts.classes:
        kept = _attribute_copied_in(facts, facts.class_inits.get(callee))
        return None if kept is None else f"{target}.{kept}"
    function = facts.functions.get(callee)
    return target if function is not None and _returns_its_copy(facts, function) else None


def _bound_to(facts: Facts, call: cst.Call) -> Optional[str]:
    """The single name `name = call` binds, methods chained on the call included: `.eval()`,
    `.to(device)` and `.requires_grad_(False)` return the copy."""
    node: cst.CSTNode = call
    parent = facts.parents.get(node)
    while isinstance(parent, cst.Attribute) and isinstance(facts.parents.get(parent), cst.Call):
        node = facts.parents[parent]
        parent = facts.parents.get(node)
    if not isinstance(parent, cst.Assign) or len(parent.targets) != 1 or parent.value is not node:
        return None
    return dotted_name(parent.targets[0].target)


def _deep_copies(facts: Facts, function: cst.FunctionDef) -> list[cst.Call]:
    return [call for call in facts.calls_named.get("copy.deepcopy", ()) if facts.function_of(call) is function]


def _attribute_copied_in(facts: Facts, init: Optional[cst.FunctionDef]) -> Optional[str]:
    """`shadow` for an `__init__` that keeps `self.shadow = copy.deepcopy(model)`."""
    for call in _deep_copies(facts, init) if init is not None else ():
        target = _bound_to(facts, call) or ""
        if target.startswith("self.") and target.count(".") == 1:
            return target[len("self."):]
    return None


def _returns_its_copy(facts: Facts, function: cst.FunctionDef) -> bool:
    """The function returns the deep copy it makes (`ema = copy.deepcopy(model)` ... `return ema`)."""
    copies = {_bound_to(facts, call) for call in _deep_copies(facts, function)}
    returned = [node.value for node in facts.own_statements(function, cst.Return)]
    return bool(returned) and all(dotted_name(value) in copies for value in returned if value is not None)


def _sync_point(facts: Facts, model: Model, copy: str, made: Statement, wrap: Statement,
                training: Optional[cst.CSTNode]) -> Optional[Statement]:
    """The statement the broadcast follows: the later of the wrap and the copy's own moves
    before the training, in the innermost block that holds them (and the training, where it is
    in the same function). None when the copy is not on its device there, or when that
    statement holds the training itself."""
    function = facts.function_of(wrap)
    if training is not None and facts.function_of(training) is not function:
        training = None
    moves = [facts.statement_of(call) for call in facts.device_moves.get(copy, ())
             if facts.function_of(call) is function and facts.start_of(call) > facts.start_of(made)
             and (training is None or facts.end_of(call) <= facts.start_of(training))]
    if not moves and not _on_the_models_device(facts, model, copy, made):
        return None
    reaching: list[cst.CSTNode] = [wrap, *moves]
    block = innermost_common_block(facts, [*reaching, *([training] if training is not None else [])])
    anchors = [cast(Optional[Statement], facts.ancestor_in(statement, block)) for statement in reaching]
    placed = [anchor for anchor in anchors if anchor is not None]
    if len(placed) < len(anchors):
        return None
    point = max(placed, key=facts.start_of)
    holding = facts.ancestor_in(training, block) if training is not None else None
    if holding is not None and facts.start_of(holding) <= facts.start_of(point):
        return None
    return point


def _bound_before_in_its_block(facts: Facts, copy: str, point: Statement, made: Statement) -> bool:
    """`ema = None` directly in the block of `point`, before the statement that holds `made`."""
    block = facts.parents.get(point)
    holding = facts.ancestor_in(made, block) if block is not None else None
    if holding is None or not isinstance(block, (cst.Module, cst.IndentedBlock)):
        return False
    for statement in block.body:
        if statement is holding:
            return False
        if isinstance(statement, cst.SimpleStatementLine) and any(
                isinstance(small, cst.Assign) and any(dotted_name(target.target) == copy for target in small.targets)
                and isinstance(small.value, cst.Name) and small.value.value == "None" for small in statement.body):
            return True
    return False


def _on_the_models_device(facts: Facts, model: Model, copy: str, made: Statement) -> bool:
    """The copy is made on its device: moved in the statement that makes it, or copied from a
    model already moved (the wrap waits for a later load or init of the model)."""
    moved_names = {copy, model.name}
    return any(facts.function_of(call) is facts.function_of(made) and facts.start_of(call) <= facts.end_of(made)
               for name in moved_names for call in facts.device_moves.get(name, ()))


_COPIED_BEFORE_THE_MOVE = """\
import copy
import torch
from torch.utils.data import DataLoader, TensorDataset

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = torch.nn.Linear(4, 1)
ema = copy.deepcopy(model)
model.to(device)
ema.to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
for epoch in range(3):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            for e, p in zip(ema.parameters(), model.parameters()):
                e.lerp_(p, 0.1)
"""


CASES = (
    Emits(_COPIED_BEFORE_THE_MOVE, "DDP133", ("for tensor in [*ema.parameters(), *ema.buffers()]:",)),
    # A target network given the policy's weights before both move.
    Emits(_COPIED_BEFORE_THE_MOVE.replace("ema = copy.deepcopy(model)", "ema = torch.nn.Linear(4, 1)\n"
                                          "ema.load_state_dict(model.state_dict())"), "DDP133"),
    # Moved under a GPU test: the broadcast follows the `if`, so that CPU ranks take rank 0's weights too.
    Emits(_COPIED_BEFORE_THE_MOVE.replace("model.to(device)\nema.to(device)\n", "if torch.cuda.is_available():\n"
                                          "    model = model.cuda()\n    ema = ema.cuda()\n"), "DDP133",
          ("    ema = ema.to(device)\nif distributed:\n    model = DDP(", "\nif distributed:\n    # Made from")),
    # torch's AveragedModel copies the model's weights at its first update_parameters.
    Silent(_COPIED_BEFORE_THE_MOVE.replace("ema = copy.deepcopy(model)", "ema = AveragedModel(model)").replace(
        "import copy", "from torch.optim.swa_utils import AveragedModel"), "DDP133"),
    # Copied after the move: the copy follows the wrap and reads the module (DDP103).
    Silent(_COPIED_BEFORE_THE_MOVE.replace("ema = copy.deepcopy(model)\nmodel.to(device)\nema.to(device)\n",
                                           "model.to(device)\nema = copy.deepcopy(model)\n"), "DDP133"),
)
