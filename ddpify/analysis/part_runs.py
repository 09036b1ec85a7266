"""Where a function runs a part of a module it holds, rather than the module itself.

DDP shares gradients only for a forward that goes through the wrapper (`model(x)`). A
function handed the model that runs a part of it (`model.backbone(x)`, `model.heads[0](f)`,
`for head in model.heads: head(f)`, `getattr(model, "classifier")(f)`, `model.encode(x)`,
or an alias: `heads = model.heads` then `heads[0](f)`) runs those parameters outside the
wrapper's forward. Under no_grad (a sample, a validation pass) that is what the raw module
is for; in a training step whose loss is backpropagated it is not safe (rules/part_runs.py).

Read with `ast`, the same for the script's own functions and for those of its other
modules: the nodes found are the calls, whose positions the rules map back to the script.
"""
import ast
from collections.abc import Iterator
from typing import Optional, Union

from ddpify import ast_walk
from ddpify.analysis import names
from ddpify.analysis.ast_names import dotted_ast

# A module's methods and attributes that run no forward, the wrapper's own, and the methods
# of what a part may hold besides modules (a tensor, a dict of settings): `model.anchors.view(
# -1, 2)`, `model.config.get("k")`, `model.fc.weight.norm()` read the model, they run no part.
_NOT_A_PART_RUN = names.NOT_FORWARD | names.WRAPPER_ATTRIBUTES | frozenset({
    "item", "tolist", "detach", "numpy", "mean", "sum", "max", "min", "argmax", "argmin", "norm", "size",
    "dim", "numel", "long", "int", "keys", "values", "items", "get", "view", "reshape", "squeeze",
    "unsqueeze", "t", "clone", "clamp", "transpose", "permute", "contiguous", "flatten", "expand",
    "expand_as", "repeat", "type_as", "pow", "abs", "sqrt", "exp", "log", "split", "chunk", "index_select",
    "append", "extend", "update", "pop", "copy", "format", "startswith", "endswith", "register_parameter",
    "named_modules", "get_parameter", "register_forward_hook", "register_forward_pre_hook", "fill_", "zero_",
    "copy_", "mul_", "add_", "data_ptr", "requires_grad_", "count", "index",
})
# Attributes that hold tensors, not parts: a call through them is a tensor method.
_TENSOR_ATTRIBUTES = frozenset({"weight", "bias", "data", "grad", "running_mean", "running_var"})
_NO_GRAD = ("no_grad", "inference_mode")


def part_runs(function: Union[ast.FunctionDef, ast.AsyncFunctionDef, ast.Module], holder: str,
              frozen: frozenset[str] = frozenset()) -> list[ast.Call]:
    """The calls in `function` (not in functions nested in it; for a module, its own
    statements) that run a part of the module `holder` names (a parameter, `self.model`) with
    gradients on: under no `torch.no_grad()` block or decorator. A call of the holder itself
    (`model(x)`, `model.forward(x)`) runs the whole module and is not one, nor a run of a
    part (or method) named in `frozen`, which trains nothing (frozen_parts)."""
    if not isinstance(function, ast.Module) and any(_no_grad(decorator) for decorator in function.decorator_list):
        return []
    parts = _aliases(function, holder)
    # `model.body(x).detach()`: no gradient reaches the part from there.
    detached = {id(node.func.value) for node in ast_walk.walk(function) if isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute) and node.func.attr == "detach"}
    found: list[ast.Call] = []
    for node, without_grad in _walk(function.body, False):
        if without_grad or not isinstance(node, ast.Call) or id(node) in detached:
            continue
        if _runs_a_part(node.func, holder, parts) and _first_attribute(node.func, holder) not in frozen:
            found.append(node)
    return found


def frozen_parts(tree: ast.Module) -> frozenset[str]:
    """Attributes of the module's classes that train nothing: parts their `__init__` freezes
    (`self.teacher.requires_grad_(False)`, `for p in self.teacher.parameters(): p.requires_grad
    = False`), modules with no parameters (`self.criterion = nn.CrossEntropyLoss()`), and plain
    values (`self.label_smoothing = 0.1`); and methods that run or read nothing else (`def
    forward_teacher(self, x): return self.teacher(x)`, `def loss(self, logits, y): return
    F.cross_entropy(logits, y)`). Running them trains nothing, with or without the wrapper. A
    method name counts only when every class's method of that name does."""
    frozen: set[str] = set()
    methods: dict[str, list[ast.FunctionDef]] = {}
    for owner in (node for node in ast_walk.statements(tree) if isinstance(node, ast.ClassDef)):
        for method in owner.body:
            if isinstance(method, ast.FunctionDef) and method.name == "__init__":
                frozen |= _frozen_in(method) | _untrained_in(method)
            elif isinstance(method, ast.FunctionDef) and method.name != "forward":
                methods.setdefault(method.name, []).append(method)
    changed = True
    while changed:
        changed = False
        for name, definitions in methods.items():
            if name not in frozen and all(_uses_only(method, frozen) for method in definitions):
                frozen.add(name)
                changed = True
    return frozenset(frozen)


def _uses_only(method: ast.FunctionDef, frozen: set[str]) -> bool:
    """The method reads no attribute of its object but those named (its runs included)."""
    receiver = method.args.args[0].arg if method.args.args else None
    if receiver is None:
        return False
    read = {_first_attribute(node, receiver) for node in ast_walk.walk(method)
            if isinstance(node, (ast.Attribute, ast.Subscript)) and _first_attribute(node, receiver) is not None}
    if "parameters" in read and _parameters_read_for_their_kind(method, receiver):
        read.discard("parameters")
    return read <= frozen


# What a tensor gives that takes only its dtype and device: a new tensor made like it (with
# none of its values and no gradient link to it), or the device and dtype themselves.
_MADE_LIKE = frozenset({"new_zeros", "new_ones", "new_empty", "new_full", "new", "device", "dtype"})


def _parameters_read_for_their_kind(method: ast.FunctionDef, receiver: str) -> bool:
    """Rule: `weight = next(self.parameters())` then `weight.new_zeros(layers, batch, size)`
    (an RNN's `init_hidden`, as pytorch/examples' word language model writes it), `next(
    self.parameters()).new_zeros(...)`, `weight = next(self.parameters()).data` then
    `weight.new(...).zero_()`, or `torch.zeros(..., device=next(self.parameters()).device)`:
    the method reads the parameters only for their dtype and device, and what it makes carries
    no gradient to them, so calling it outside the wrapper's forward trains nothing. Any other
    read of `self.parameters()` (a sum of squares for a penalty) still runs the parameters."""
    parents = {id(child): node for node in ast_walk.walk(method) for child in ast.iter_child_nodes(node)}
    calls = [node for node in ast_walk.walk(method) if isinstance(node, ast.Call)
             and isinstance(node.func, ast.Attribute) and node.func.attr == "parameters"
             and dotted_ast(node.func.value) == receiver]
    return bool(calls) and all(_first_parameter_read_for_its_kind(method, call, parents) for call in calls)


def _first_parameter_read_for_its_kind(method: ast.FunctionDef, call: ast.Call, parents: dict) -> bool:
    taken = parents.get(id(call))
    if not (isinstance(taken, ast.Call) and isinstance(taken.func, ast.Name) and taken.func.id == "next"
            and taken.args == [call]):
        return False
    value: ast.AST = taken
    above = parents.get(id(value))
    if isinstance(above, ast.Attribute) and above.attr == "data":
        value, above = above, parents.get(id(above))
    if isinstance(above, ast.Attribute):
        return above.attr in _MADE_LIKE
    if not (isinstance(above, ast.Assign) and len(above.targets) == 1 and isinstance(above.targets[0], ast.Name)):
        return False
    name = above.targets[0].id
    loads = [node for node in ast_walk.walk(method) if isinstance(node, ast.Name) and node.id == name
             and isinstance(node.ctx, ast.Load)]
    return all(isinstance(parents.get(id(load)), ast.Attribute) and parents[id(load)].attr in _MADE_LIKE
               for load in loads)


def _untrained_in(init: ast.FunctionDef) -> set[str]:
    """`self.X` set in `__init__` to a plain value (a number, a string, a name, arithmetic of
    them) or to a module with no parameters (a loss, an activation, pooling); only where every
    assignment of it there is such."""
    plain: dict[str, bool] = {}
    for node in ast_walk.walk(init):
        if not isinstance(node, ast.Assign):
            continue
        for target, value in _paired(node):
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
                plain[target.attr] = plain.get(target.attr, True) and value is not None and _untrained_value(value)
    return {name for name, untrained in plain.items() if untrained}


def _paired(node: ast.Assign) -> Iterator[tuple[ast.expr, Optional[ast.expr]]]:
    """Each target of the assignment with the value it gets: `self.layers, self.hidden =
    layers, hidden` pairs them element by element (None where that cannot be read)."""
    for target in node.targets:
        if isinstance(target, (ast.Tuple, ast.List)):
            values = node.value.elts if isinstance(node.value, (ast.Tuple, ast.List)) \
                and len(node.value.elts) == len(target.elts) else [None] * len(target.elts)
            yield from zip(target.elts, values)
        else:
            yield target, node.value


def _untrained_value(value: ast.expr) -> bool:
    if isinstance(value, ast.Call):
        called = (dotted_ast(value.func) or "").rsplit(".", 1)[-1]
        return called.endswith("Loss") or f"torch.nn.{called}" in names.PARAMETERLESS_LAYERS
    return not any(isinstance(node, (ast.Call, ast.Lambda)) for node in ast_walk.walk(value))


def _frozen_in(init: ast.FunctionDef) -> set[str]:
    """`self.X` of `self.X.requires_grad_(False)`, and of a loop over `self.X.parameters()`
    whose body sets `requires_grad` to False."""
    frozen: set[str] = set()
    for node in ast_walk.walk(init):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "requires_grad_" \
                and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value is False:
            owner = _first_attribute(node.func.value, "self")
            if owner is not None:
                frozen.add(owner)
        if isinstance(node, ast.For) and isinstance(node.iter, ast.Call) and isinstance(node.iter.func, ast.Attribute) \
                and node.iter.func.attr == "parameters" and any(_sets_no_grad(inner) for inner in ast_walk.walk(node)):
            owner = _first_attribute(node.iter.func.value, "self")
            if owner is not None:
                frozen.add(owner)
    return frozen


def _sets_no_grad(node: ast.AST) -> bool:
    """`p.requires_grad = False`."""
    return isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and node.value.value is False \
        and any(isinstance(target, ast.Attribute) and target.attr == "requires_grad" for target in node.targets)


def _first_attribute(func: ast.expr, holder: str) -> Optional[str]:
    """`teacher` of `self.teacher.blocks[0]` or `self.teacher`: the attribute read on the holder."""
    node: ast.expr = func
    first: Optional[str] = None
    while isinstance(node, (ast.Attribute, ast.Subscript)) and dotted_or_module(node) != holder:
        first = node.attr if isinstance(node, ast.Attribute) else None
        node = node.value
    return first if dotted_or_module(node) == holder else None


def dotted_or_module(node: ast.expr) -> Optional[str]:
    """`a.b`, and `model.module` for `getattr(model, "module", model)`: the raw module of a
    wrapper, as ddpify's output reads it (the self-check's holder `model.module`)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" \
            and len(node.args) == 3 and isinstance(node.args[1], ast.Constant) and node.args[1].value == "module":
        inner = dotted_ast(node.args[0])
        return f"{inner}.module" if inner is not None and inner == dotted_ast(node.args[2]) else None
    return dotted_ast(node)


def _walk(statements: list[ast.stmt], without_grad: bool) -> Iterator[tuple[ast.AST, bool]]:
    """Every node under the statements, with whether a no_grad block is around it; nested
    functions and classes are left out (their calls run when they are called)."""
    for statement in statements:
        yield from _walk_node(statement, without_grad)


def _walk_node(node: ast.AST, without_grad: bool) -> Iterator[tuple[ast.AST, bool]]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
        return
    yield node, without_grad
    if isinstance(node, ast.With) and any(_no_grad(item.context_expr) for item in node.items):
        without_grad = True
    for child in ast_walk.child_nodes(node):
        yield from _walk_node(child, without_grad)


def _no_grad(expression: ast.expr) -> bool:
    """`torch.no_grad()`, `@torch.no_grad()`, `torch.inference_mode()`, `set_grad_enabled(False)`."""
    call = expression if isinstance(expression, ast.Call) else None
    name = dotted_ast(call.func if call is not None else expression) or ""
    last = name.rsplit(".", 1)[-1]
    if last == "set_grad_enabled":
        return call is not None and bool(call.args) and isinstance(call.args[0], ast.Constant) \
            and call.args[0].value is False
    return last in _NO_GRAD


def _aliases(function: ast.AST, holder: str) -> set[str]:
    """Names that hold a part of the module: `heads = model.heads`, `backbone =
    getattr(model, "backbone")`, the variable of `for head in model.heads:` (or of
    `enumerate(model.heads)`, a comprehension over them), and so on from those, in turn."""
    parts: set[str] = set()
    changed = True
    while changed:
        changed = False
        for node in ast_walk.walk(function):
            bound: list[ast.expr] = []
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and _part_of(node.value, holder, parts):
                bound = [node.targets[0]]
            elif isinstance(node, (ast.For, ast.comprehension)) and _iterates_parts(node.iter, holder, parts):
                bound = [node.target]
            for target in bound:
                for name in _loop_names(target):
                    if name not in parts and name != holder:
                        parts.add(name)
                        changed = True
    return parts


def _loop_names(target: ast.expr) -> list[str]:
    """`head`, or the last name of `i, head` (what enumerate hands out second)."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Tuple) and target.elts and isinstance(target.elts[-1], ast.Name):
        return [target.elts[-1].id]
    return []


def _iterates_parts(iterable: ast.expr, holder: str, parts: set[str]) -> bool:
    if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name) \
            and iterable.func.id in ("enumerate", "reversed", "list") and iterable.args:
        iterable = iterable.args[0]
    return _part_of(iterable, holder, parts) or dotted_or_module(iterable) == holder


def _part_of(value: ast.expr, holder: str, parts: set[str]) -> bool:
    """`model.heads`, `model.heads[0]`, `heads[1]`, `getattr(model, "fc")`: a part of the
    holder (never the holder itself, nor what the wrapper has too: `model.module`), or of a part."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "getattr" \
            and len(value.args) >= 2 and dotted_or_module(value) is None:
        return dotted_or_module(value.args[0]) == holder or dotted_or_module(value.args[0]) in parts
    chain: list[str] = []
    subscripted = False
    while isinstance(value, (ast.Attribute, ast.Subscript)) and dotted_or_module(value) != holder:
        if isinstance(value, ast.Attribute):
            chain.append(value.attr)
        else:
            subscripted = True
        value = value.value
    if _TENSOR_ATTRIBUTES & set(chain):
        return False
    root = dotted_or_module(value)
    if root == holder:
        # (chain[-1] is the attribute read on the holder itself)
        return chain[-1] not in names.WRAPPER_ATTRIBUTES if chain else subscripted
    return root in parts


def _runs_a_part(func: ast.expr, holder: str, parts: set[str]) -> bool:
    """The function a call runs is a part: `model.encode`, `model.heads[0]`, `heads[0]`,
    `head`, `getattr(model, "classifier")`; not `model` itself, `model.forward`, a method
    that runs no forward, nor a tensor's."""
    if isinstance(func, ast.Attribute) and func.attr in _NOT_A_PART_RUN:
        return False
    if isinstance(func, ast.Name):
        return func.id in parts
    return _part_of(func, holder, parts)
