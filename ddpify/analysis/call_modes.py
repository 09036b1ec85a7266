"""Whether one call of a function that can train takes its training steps, read at the call.

A shared epoch function is often called once to train and once to evaluate:
`run_epoch(model, train_loader, optimizer)` then `run_epoch(model, val_loader)` (the
optimizer defaults to None), `train_one_epoch(..., train=False)`, `run(model, loader,
mode="val")`. Its loop trains, but the loader of an evaluating call is never trained over:
under torchrun it must stay whole (a DistributedSampler's padding would count samples
twice in its figures). Rule: a call evaluates when every training step of the function
(`loss.backward()`, `optimizer.step()` in its body) sits under an `if` whose test is false
for the values that call gives: literal arguments, or literal defaults of the parameters it
leaves out, also through a name the function binds from them before its loop (`training =
optimizer is not None`). Anything not literal leaves the call a training one, as before.
"""
from typing import TYPE_CHECKING, Optional, Union, cast

import libcst as cst

from ddpify.analysis.facts import FactRecord
from ddpify.analysis.nodes import find_all
from ddpify.analysis.step_callbacks import hands_a_step

if TYPE_CHECKING:
    from ddpify.analysis.values import ValueFlow


class _Unknown:
    """A value the call site does not tell."""


UNKNOWN = _Unknown()
Value = Union[None, bool, int, str, _Unknown]


def evaluating_call(facts: FactRecord, callee: cst.FunctionDef, call: cst.Call, on_object: bool) -> bool:
    """The call runs none of `callee`'s training steps (see the module's rule)."""
    if callee in facts.step_parameters:
        # Its pass trains only through the step function a call hands it (step_callbacks.py).
        return not hands_a_step(cast("ValueFlow", facts), callee, call)
    steps = [step for step in facts.training_calls if _inside(facts, step, callee)]
    if not steps or any(_inside(facts, loop, callee) for loop in facts.loops_calling_training):
        return False
    values = _given_values(callee, call, on_object)
    if not any(value is not UNKNOWN for value in values.values()):
        return False
    _bind_flags(callee, values)
    return all(_skipped(facts, step, callee, values) for step in steps)


def _inside(facts: FactRecord, node: cst.CSTNode, function: cst.FunctionDef) -> bool:
    parent = facts.parents.get(node)
    while parent is not None:
        if parent is function:
            return True
        parent = facts.parents.get(parent)
    return False


def _given_values(callee: cst.FunctionDef, call: cst.Call, on_object: bool) -> dict[str, Value]:
    """Each parameter's value at this call: its literal argument or default, else UNKNOWN."""
    params = list(callee.params.params)
    if on_object and params and params[0].name.value in ("self", "cls"):
        params = params[1:]
    values: dict[str, Value] = {}
    for param in [*params, *callee.params.kwonly_params]:
        values[param.name.value] = _literal(param.default) if param.default is not None else UNKNOWN
    positional = [arg for arg in call.args if arg.keyword is None]
    if any(arg.star for arg in call.args):
        return {name: UNKNOWN for name in values}
    for param, arg in zip(params, positional):
        values[param.name.value] = _literal(arg.value)
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value in values:
            values[arg.keyword.value] = _literal(arg.value)
    return values


def _bind_flags(callee: cst.FunctionDef, values: dict[str, Value]) -> None:
    """`training = optimizer is not None`, `is_train = mode == "train"`: names the function
    binds once, at its top level, from what the call tells. A parameter or flag bound again
    anywhere else in the function (`if epoch > 5: training = False`) is not known."""
    bound: dict[str, int] = {}
    for target in find_all(callee.body, cst.AssignTarget) + find_all(callee.body, cst.AugAssign):
        name = target.target.value if isinstance(target.target, cst.Name) else None
        if name is not None:
            bound[name] = bound.get(name, 0) + 1
    for name in bound:
        if name in values:
            values[name] = UNKNOWN  # a parameter bound again in the body
    body = callee.body
    if not isinstance(body, cst.IndentedBlock):
        return
    for statement in body.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(
                    small.targets[0].target, cst.Name):
                name = small.targets[0].target.value
                values[name] = _evaluated(small.value, values) if bound.get(name) == 1 else UNKNOWN


def _skipped(facts: FactRecord, step: cst.CSTNode, callee: cst.FunctionDef, values: dict[str, Value]) -> bool:
    """An `if` around the step, inside the function, takes the other branch for these values."""
    child: cst.CSTNode = step
    parent = facts.parents.get(step)
    while parent is not None and parent is not callee:
        if isinstance(parent, cst.If):
            test = _evaluated(parent.test, values)
            known = not isinstance(test, _Unknown)
            if known and (child is parent.body and not test or child is parent.orelse and test):
                return True
        child, parent = parent, facts.parents.get(parent)
    return False


def _literal(node: Optional[cst.BaseExpression]) -> Value:
    if isinstance(node, cst.Name) and node.value in ("None", "True", "False"):
        return {"None": None, "True": True, "False": False}[node.value]
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else UNKNOWN
    if isinstance(node, cst.Integer):
        return int(node.value, 0)
    return UNKNOWN


def _evaluated(node: cst.BaseExpression, values: dict[str, Value]) -> Value:
    """The value of a test made of names, literals, `not`, `and`/`or` and one comparison."""
    if isinstance(node, cst.Name) and node.value not in ("None", "True", "False"):
        return values.get(node.value, UNKNOWN)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not):
        inner = _evaluated(node.expression, values)
        return inner if isinstance(inner, _Unknown) else not inner
    if isinstance(node, cst.BooleanOperation):
        left, right = _evaluated(node.left, values), _evaluated(node.right, values)
        is_and = isinstance(node.operator, cst.And)
        if not isinstance(left, _Unknown) and bool(left) != is_and:
            return left  # `False and ...`, `True or ...`
        return right if not isinstance(left, _Unknown) else UNKNOWN
    if isinstance(node, cst.Comparison) and len(node.comparisons) == 1:
        return _compared(node, values)
    return _literal(node)


def _compared(node: cst.Comparison, values: dict[str, Value]) -> Value:
    target = node.comparisons[0]
    left, operator = _evaluated(node.left, values), target.operator
    if isinstance(operator, (cst.In, cst.NotIn)) and isinstance(target.comparator, (cst.Tuple, cst.List, cst.Set)):
        options = [_literal(element.value) for element in target.comparator.elements]
        if isinstance(left, _Unknown) or any(isinstance(option, _Unknown) for option in options):
            return UNKNOWN
        return (left in options) == isinstance(operator, cst.In)
    right = _evaluated(target.comparator, values)
    if isinstance(operator, (cst.Is, cst.IsNot)) and (right is None or left is None):
        if isinstance(left, _Unknown) or isinstance(right, _Unknown):
            return UNKNOWN
        return (left is right) == isinstance(operator, cst.Is)
    if isinstance(left, _Unknown) or isinstance(right, _Unknown):
        return UNKNOWN
    if isinstance(operator, cst.Equal):
        return left == right
    if isinstance(operator, cst.NotEqual):
        return left != right
    return UNKNOWN
