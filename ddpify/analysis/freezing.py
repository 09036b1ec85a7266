"""Which statements change `requires_grad`, and which of them reach part of a model.

DDP registers the parameters that require grad when it wraps a model. Freezing part of the
model (`model.backbone.requires_grad_(False)`, a loop over `model.modules()` that freezes
the BatchNorm weights, `p.requires_grad = False` for the parameters whose name starts with
"backbone") works on the model: before the wrap, the wrap must come after it; after the
wrap, DDP would wait for gradients that never come (DDP111). Freezing the whole model at
once (`for p in netD.parameters(): p.requires_grad = False`) is safe anywhere.

The rule is the same however the part is reached: directly through an attribute or an
index of the model, or through a loop variable. A loop reaches part of the model when it
walks a part (`model.backbone.parameters()`), or when it walks the whole model but sets
requires_grad only under a test (`if isinstance(m, nn.BatchNorm2d):`, `if "head" in name:`),
to a value that depends on the item (`p.requires_grad = name.startswith("head")`), or only
on an attribute of each item (`m.weight.requires_grad = False`, biases untouched).
"""
import ast
from typing import Optional, Union, cast

import libcst as cst

from ddpify import ast_walk
from ddpify.analysis.nodes import calls_within, dotted_name, find_all, names_within, parameter_names, within

# Methods of an nn.Module that walk its parameters or its submodules.
MODULE_WALKS = frozenset({
    "parameters", "named_parameters", "modules", "named_modules", "children", "named_children",
})

Change = Union[cst.Call, cst.Assign]


def requires_grad_changes(node: cst.CSTNode) -> list[Change]:
    """`X.requires_grad_(...)` calls and `X.requires_grad = ...` assignments within node."""
    return [change for change, _ in _changes_with_tests(node)]


def changed_owner(change: Change) -> cst.BaseExpression:
    """`X` of `X.requires_grad_(...)` or `X.requires_grad = ...`."""
    if isinstance(change, cst.Call):
        return cast(cst.Attribute, change.func).value
    target = next(t.target for t in change.targets
                  if isinstance(t.target, cst.Attribute) and t.target.attr.value == "requires_grad")
    return cast(cst.Attribute, target).value


def walked_modules(loop: cst.For) -> list[cst.BaseExpression]:
    """`model.backbone` of `for p in model.backbone.parameters():`, `model` of
    `for name, m in model.named_modules():`."""
    return [cast(cst.Attribute, call.func).value for call in calls_within(loop.iter)
            if isinstance(call.func, cst.Attribute) and call.func.attr.value in MODULE_WALKS]


def part_of(node: cst.BaseExpression, name: str) -> bool:
    """`model.backbone`, `model[0]`, `model.layers[-1].fc`: reached from `name`, not `name`
    itself (nor `model.module`, the whole model again)."""
    steps = 0
    while isinstance(node, (cst.Attribute, cst.Subscript)):
        if dotted_name(node) == name:
            return steps > 0
        if not (isinstance(node, cst.Attribute) and node.attr.value == "module"):
            steps += 1
        node = node.value
    return dotted_name(node) == name and steps > 0


def loop_freezes_part_of(loop: cst.For, name: str) -> bool:
    """The loop sets requires_grad of some of `name`'s parameters, not all of them (see the
    module's docstring)."""
    walked = walked_modules(loop)
    if not walked:
        return False
    changes = _loop_variable_changes(loop)
    if not changes:
        return False
    if any(part_of(module, name) for module in walked):
        return True
    return any(changes.values()) and any(dotted_name(module) == name for module in walked)


def models_frozen_in_part(loop: cst.For) -> list[str]:
    """The names of the models (`model`, `self.net`) part of which the loop freezes: each
    module it walks, or the model that module is part of."""
    found: list[str] = []
    for module in walked_modules(loop):
        candidates = [dotted_name(module)]
        root = module
        while isinstance(root, (cst.Attribute, cst.Subscript)):
            root = root.value
            candidates.append(dotted_name(root))
        found.extend(name for name in candidates if name is not None and name not in found
                     and loop_freezes_part_of(loop, name))
    return found


def parameters_changed(function: cst.FunctionDef) -> dict[str, bool]:
    """The parameters of the function whose parameters' requires_grad it changes, each with
    whether only part of them (through an attribute or index of it, or a loop that freezes
    part of it)."""
    parameters = parameter_names(function)
    changed: dict[str, bool] = {}
    for change in requires_grad_changes(function):
        owner = changed_owner(change)
        for parameter in parameters:
            if dotted_name(owner) == parameter:
                changed[parameter] = changed.get(parameter, False)
            elif part_of(owner, parameter):
                changed[parameter] = True
    for loop in find_all(function, cst.For):
        # Only a loop that sets requires_grad on what it walks changes it: the momentum update
        # `for s, t in zip(self.student.parameters(), self.teacher.parameters()): t.mul_(m)`
        # walks the same modules and freezes nothing.
        if not _loop_variable_changes(loop):
            continue
        for module in walked_modules(loop):
            for parameter in parameters:
                if dotted_name(module) == parameter or part_of(module, parameter):
                    part = part_of(module, parameter) or loop_freezes_part_of(loop, parameter)
                    changed[parameter] = changed.get(parameter, False) or part
    return changed


def _loop_variable_changes(loop: cst.For) -> dict[Change, bool]:
    """The requires_grad changes in the loop's body made on a variable of this loop or of a
    loop inside it (`p.requires_grad = False`, `m.weight.requires_grad_(False)`), each with
    whether it reaches only some of the items: under a test inside the loop, on an attribute
    of the item, or to a value read from the loop's variables."""
    variables = set(names_within(loop.target))
    for inner in _loops_in(loop.body):
        variables.update(names_within(inner.target))
    found: dict[Change, bool] = {}
    for change, under_test in _changes_with_tests(loop.body):
        owner = changed_owner(change)
        root = owner
        while isinstance(root, (cst.Attribute, cst.Subscript)):
            root = root.value
        if not (isinstance(root, cst.Name) and root.value in variables):
            continue
        if isinstance(change, cst.Assign):
            value: Optional[cst.BaseExpression] = change.value
        else:
            value = change.args[0].value if change.args else None
        found[change] = under_test or owner is not root or (
            value is not None and bool(variables & set(names_within(value))))
    return found


def _loops_in(node: cst.CSTNode) -> list[cst.For]:
    return find_all(node, cst.For, into_functions=False)


def _changes_with_tests(node: cst.CSTNode) -> list[tuple[Change, bool]]:
    """Each requires_grad change within node, with whether an `if` within node holds it."""
    # Every node an `if` within node holds (the `if` itself and its test included).
    under_a_test = {id(inner) for test in find_all(node, cst.If) for inner in within(test)}
    found: list[tuple[Change, bool]] = []
    for inner in within(node):
        if isinstance(inner, cst.Call):
            if isinstance(inner.func, cst.Attribute) and inner.func.attr.value == "requires_grad_":
                found.append((inner, id(inner) in under_a_test))
        elif isinstance(inner, cst.Assign) and any(
                isinstance(t.target, cst.Attribute) and t.target.attr.value == "requires_grad"
                for t in inner.targets):
            found.append((inner, id(inner) in under_a_test))
    return found


def tree_freezes(tree: ast.Module) -> bool:
    """The module sets requires_grad to a value that may be False: `p.requires_grad = flag`,
    `m.requires_grad_(False)` (not `requires_grad_()` nor `= True`, which only unfreeze). The
    same reading as the collector's for the file being migrated (Facts.freezes_parameters)."""
    for node in ast_walk.walk(tree):
        if isinstance(node, ast.Assign) and any(
                isinstance(target, ast.Attribute) and target.attr == "requires_grad" for target in node.targets):
            if not (isinstance(node.value, ast.Constant) and node.value.value is True):
                return True
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "requires_grad_" and node.args \
                and not (isinstance(node.args[0], ast.Constant) and node.args[0].value is True):
            return True
    return False
