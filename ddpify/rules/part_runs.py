"""A part of the wrapped model run outside its forward in a training step (DDP116).

DDP shares gradients only for what runs inside the wrapper's forward. A loss that runs a part
of the model itself (`model.heads[0](feats)`, `model.encode(x)` in a contrastive loss,
`for head in model.heads: head(x)`, `getattr(model, "classifier")(f)`) uses those
parameters outside it: where the forward never runs, no gradient is shared at all and the
ranks drift apart without an error; where it runs too, a parameter the forward does not use
makes DDP fail ("Expected to mark a variable ready only once" with
find_unused_parameters=True) or, on NCCL, reduces out of bucket order. Handed the wrapper,
the part is not there (AttributeError); handed the raw module, the step is wrong. Neither is
safe, so the call is left as written and reported with its fix. A part run under no_grad
(sampling, a validation pass) or whose result no backward reaches reads the raw module as
before (DDP103).
"""
import ast
from collections.abc import Iterable
from typing import Optional, Union, cast

import libcst as cst

from ddpify import ast_walk
from ddpify.analysis import ast_twin, figures, part_runs
from ddpify.analysis.control import Facts
from ddpify.analysis.facts import Holder, Model
from ddpify.analysis.memo import per_migration
from ddpify.analysis.nodes import argument_among, dotted_name, find_all, names_in
from ddpify.diagnostics import Rule, Severity
from ddpify.emit.edits import Edits
from ddpify.rules import method_forwards
from ddpify.rules.cases import Emits, Silent

RULES = (
    Rule("DDP116", Severity.WARNING, "a part of the wrapped model runs outside its forward in a training step",
         "DDP shares gradients only for what runs inside the wrapper's forward (`model(x)`). A loss "
         "that runs a part of the model itself (`model.heads[0](f)`, `model.encode(x)`, `for head in "
         "model.heads: head(f)`) uses those parameters outside it: with no forward through the wrapper "
         "no gradient is shared and the ranks drift apart silently; beside one, a parameter the forward "
         "does not use fails the step (\"Expected to mark a variable ready only once\") or, on NCCL, is "
         "reduced out of bucket order. The DDP wrapper has no such part (AttributeError), and the raw "
         "module would train wrongly, so the call is left as written.",
         "Run the part inside the model's forward (return its output from forward too), or give the "
         "loss a module of its own whose forward runs the parts, and wrap that module in DDP."),
)

# How many calls up a part run's value is followed to the backward it reaches.
_MAX_CALLERS = 4


def keep_parts_run_in_training(facts: Facts, edits: Edits, model: Model, holders: set[Holder],
                               wrap: cst.CSTNode) -> None:
    """Rule: every part of the wrapped model that a function of this file (or a function of
    another module it is handed to) runs with gradients on, in a training step whose backward
    its value reaches, is left as written and reported (DDP116), with the `.module` reads
    planned for it withdrawn: no silent wrong step, no wrong-with-exit-0."""
    if any(diagnostic.code == "DDP903" for diagnostic in edits.diagnostics):
        return  # the model trains around its wrapper, reported already: one report, the reads as they were
    routed = method_forwards.training_method_calls(facts, model)  # run as the wrapper's forward (DDP131)
    for function, name in sorted(_expanded(facts, holders), key=lambda held: _start(facts, held[0])):
        runs = [run for run in _runs_in(facts, function, name)
                if run not in routed and not _before(facts, run, wrap, model) and _feeds_a_backward(facts, run, 0)]
        if not runs:
            continue
        for expression in [*(run.func for run in runs), *_part_sources(facts, function, name)]:
            _withdraw_unwraps_within(facts, edits, expression)
        reported: set[int] = set()
        for run in runs:  # each line left as written, once
            if facts.line_of(run) not in reported:
                reported.add(facts.line_of(run))
                edits.report("DDP116", run, (
                    f"`{edits.code(run.func)}(...)` runs a part of `{model.name}` outside the DDP wrapper's forward, "
                    f"in a training step whose loss is backpropagated: DDP shares no gradient for it (the ranks drift "
                    f"apart, or the step fails); run it inside the model's forward (return its output too), or wrap "
                    f"a module whose forward runs it in DDP"))
    helper_calls = sorted(facts.helper_part_runs.items(), key=lambda item: facts.start_of(item[0]))
    for call, (positional, run_in_part) in helper_calls:
        for parameter, (line, part) in sorted(run_in_part.items()):
            value = argument_among(call, parameter, positional)
            held = dotted_name(value) if value is not None else None
            if value is None or (facts.function_of(call), held) not in holders or _before(facts, call, wrap, model) \
                    or not _feeds_a_backward(facts, call, 0):
                continue
            _withdraw_unwraps_within(facts, edits, value)
            edits.report("DDP116", call, (
                f"`{edits.code(call.func)}` runs `{part}(...)`, a part of `{model.name}` (line {line} of its module), "
                f"outside the DDP wrapper's forward, in a training step whose loss is backpropagated: DDP shares no "
                f"gradient for it, and the wrapper has no such part; run it inside the model's forward (return its "
                f"output too), or wrap a module whose forward runs it in DDP"))


def _expanded(facts: Facts, holders: Iterable[Holder]) -> set[Holder]:
    """A `self.model` holder holds the model in every method of its class."""
    expanded = set(holders)
    for function, name in holders:
        owner = facts.class_of(function) if function is not None and name.startswith("self.") else None
        if owner is not None:
            expanded |= {(method, name) for method in owner.body.body if isinstance(method, cst.FunctionDef)}
    return expanded


def _start(facts: Facts, function: Optional[cst.FunctionDef]) -> tuple[int, int]:
    return (0, 0) if function is None else facts.start_of(function)


@per_migration
def _ast_functions(module: cst.Module) -> dict[tuple[int, str], Union[ast.FunctionDef, ast.AsyncFunctionDef]]:
    """The `ast` twin's functions by (line, name), read once per migration."""
    tree = ast_twin.of(module)
    return {} if tree is None else {(node.lineno, node.name): node for node in ast_walk.statements(tree)
                                    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


@per_migration
def _frozen(module: cst.Module) -> frozenset:
    tree = ast_twin.of(module)
    return part_runs.frozen_parts(tree) if tree is not None else frozenset()


def _ast_scope(facts: Facts, function: Optional[cst.FunctionDef]
               ) -> Union[ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, None]:
    """The `ast` twin of the function (the module for module level), found by its line."""
    if function is None:
        return ast_twin.of(facts.module)
    line = facts.positions[function.name].start.line
    return _ast_functions(facts.module).get((line, function.name.value))


def _runs_in(facts: Facts, function: Optional[cst.FunctionDef], name: str) -> list[cst.Call]:
    """The calls of `function` that run a part of what `name` holds there (part_runs.py)."""
    scope = _ast_scope(facts, function)
    if scope is None:
        return []
    found = {(call.lineno, call.col_offset, call.end_lineno, call.end_col_offset)
             for call in part_runs.part_runs(scope, name, _frozen(facts.module))}
    if not found:
        return []
    where = function.body if function is not None else facts.module
    return [call for call in find_all(where, cst.Call, into_functions=False) if _span(facts, call) in found]


def _span(facts: Facts, node: cst.CSTNode) -> tuple[int, int, int, int]:
    position = facts.positions[node]
    return position.start.line, position.start.column, position.end.line, position.end.column


def _part_sources(facts: Facts, function: Optional[cst.FunctionDef], name: str) -> list[cst.BaseExpression]:
    """Where a part is taken to run later: `heads = model.heads`, `for head in model.heads:`."""
    where = function.body if function is not None else facts.module
    found: list[cst.BaseExpression] = []
    for node in find_all(where, cst.Assign, into_functions=False):
        if _rooted_at(node.value, name):
            found.append(node.value)
    for loop in find_all(where, cst.For, into_functions=False):
        if _rooted_at(loop.iter, name):
            found.append(loop.iter)
    return found


def _rooted_at(value: cst.BaseExpression, name: str) -> bool:
    """`model.heads`, `model.heads[0]`, `enumerate(model.heads)`, `getattr(model, "fc")`."""
    if isinstance(value, cst.Call) and value.args:
        value = value.args[0].value
    while isinstance(value, (cst.Attribute, cst.Subscript)) and dotted_name(value) != name:
        value = value.value
    return dotted_name(value) == name and not isinstance(value, cst.Call)


def _withdraw_unwraps_within(facts: Facts, edits: Edits, expression: cst.CSTNode) -> None:
    """The `.module` reads planned inside the expression are not made, nor reported."""
    outer = facts.positions[expression]
    for node in list(edits.expressions):
        inner = facts.positions.get(node)
        if inner is None or (inner.start.line, inner.start.column) < (outer.start.line, outer.start.column) \
                or (inner.end.line, inner.end.column) > (outer.end.line, outer.end.column):
            continue
        del edits.expressions[node]
        edits.diagnostics = [diagnostic for diagnostic in edits.diagnostics if not (
            diagnostic.code == "DDP103" and (diagnostic.line, diagnostic.column) == (
                inner.start.line, inner.start.column + 1))]


def _before(facts: Facts, node: cst.CSTNode, wrap: cst.CSTNode, model: Model) -> bool:
    """In the model's own function, above its wrap: the raw module is what runs there."""
    return facts.function_of(node) is model.function and facts.start_of(node) < facts.start_of(wrap)


def _feeds_a_backward(facts: Facts, node: cst.CSTNode, depth: int) -> bool:
    """The value computed at node, with gradients on, reaches a `.backward()`: in its own
    function (through the names assigned from it), or through what the function returns to
    a caller that backpropagates it. A function whose callers ddpify cannot see (a loss
    object's `__call__`) is taken to feed one: the report is the safe side."""
    if figures.under_no_grad(facts, node) or depth > _MAX_CALLERS:
        return False
    function = facts.function_of(node)
    backwards = [call for call in facts.training_calls if facts.function_of(call) is function
                 and isinstance(call.func, cst.Attribute) and call.func.attr.value == "backward"]
    if backwards and _reaches(facts, node, function, [cast(cst.Attribute, call.func).value for call in backwards]):
        return True
    if function is None:
        return False
    returned = [each.value for each in find_all(function.body, cst.Return, into_functions=False)
                if each.value is not None]
    if not returned or not _reaches(facts, node, function, returned):
        return False
    callers = facts.calls_of(function)
    return not callers or any(_feeds_a_backward(facts, call, depth + 1) for call in callers)


def _reaches(facts: Facts, node: cst.CSTNode, function: Optional[cst.FunctionDef],
             targets: list[cst.BaseExpression]) -> bool:
    """Node is inside one of the target expressions, or inside the value of an assignment
    whose name one of them reads (after the assignments that feed those names, in turn)."""
    where = function.body if function is not None else facts.module
    assigned: list[tuple[set[str], cst.CSTNode]] = []
    for assign in find_all(where, cst.Assign, into_functions=False):
        assigned.append(({name for target in assign.targets for name in names_in(target.target)}, assign.value))
    for augmented in find_all(where, cst.AugAssign, into_functions=False):
        assigned.append((names_in(augmented.target), augmented.value))
    needed = set().union(*(names_in(target) for target in targets))
    sources: list[cst.CSTNode] = list(targets)
    changed = True
    while changed:
        changed = False
        for bound, value in assigned:
            if bound & needed and value not in sources:
                sources.append(value)
                needed |= names_in(value)
                changed = True
    return any(node is source or facts.ancestor_in(node, source) is not None for source in sources)


_PARTS = """\
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = torch.nn.Linear(4, 8)
        self.head = torch.nn.Linear(8, 1)

    def forward(self, x):
        return self.head(self.backbone(x))


def aux_loss(out, y, model, x):
    return F.mse_loss(out, y) + model.head(model.backbone(x)).pow(2).mean()


device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = Net().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
for epoch in range(3):
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        loss = LOSS
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(epoch, loss.item())
"""

CASES = (
    Emits(_PARTS.replace("LOSS", "aux_loss(model(x), y, model, x)"), "DDP116",
          ("model.head(model.backbone(x))",)),
    # A method of the model that runs no part of it (a loss over its outputs, a plain setting).
    Silent(_PARTS.replace("LOSS", "model.smooth(model(x), y)").replace(
        "        self.head = torch.nn.Linear(8, 1)\n",
        "        self.head = torch.nn.Linear(8, 1)\n        self.scale = 0.5\n\n"
        "    def smooth(self, out, y):\n        return F.mse_loss(out, y) * self.scale\n"), "DDP116"),
    # A method that reads the parameters only for their dtype and device (an RNN's init_hidden).
    Silent(_PARTS.replace("LOSS", "F.mse_loss(model(x) + model.start(x.size(0)), y)").replace(
        "        self.head = torch.nn.Linear(8, 1)\n",
        "        self.head = torch.nn.Linear(8, 1)\n\n"
        "    def start(self, n):\n        return next(self.parameters()).new_zeros(n, 1)\n"), "DDP116"),
    # ...but one that adds up the parameters themselves (a penalty) runs them.
    Emits(_PARTS.replace("LOSS", "F.mse_loss(model(x), y) + model.penalty()").replace(
        "        self.head = torch.nn.Linear(8, 1)\n",
        "        self.head = torch.nn.Linear(8, 1)\n\n"
        "    def penalty(self):\n        return sum(p.pow(2).sum() for p in self.parameters())\n"), "DDP116"),
    # The part run for a figure only: no backward reaches it, the raw module runs it.
    Silent(_PARTS.replace("LOSS", "F.mse_loss(model(x), y)").replace(
        "    print(epoch, loss.item())", "    print(epoch, aux_loss(model(x), y, model, x).item())"), "DDP116"),
)
