"""Which parts of a module class each output of its forward is computed from.

`return self.fc(x), aux` or `return {"logits": ..., "boxes": self.box_head(f)}`: a training
step that keeps some outputs and drops the others (`outputs, _ = net(x)`, `net(x)[0]`,
`preds["logits"]`) gives no gradient to the parts only the dropped outputs come from, and
DDP, waiting for every gradient, fails at the next step (rules/model.py, DDP105). Read with
`ast`, for a class of the file (collector) or of another module of the project (effects).
"""
import ast
from collections.abc import Callable, Mapping
from typing import Optional

from ddpify import ast_walk
from ddpify.analysis import names
from ddpify.analysis.ast_names import dotted_ast
from ddpify.analysis.facts import OutputKey, OutputParts


def output_parts(node: ast.ClassDef, parts: set[str]) -> OutputParts:
    """For each output of the class's forward, the submodules among `parts` it is computed
    from; empty when forward does not hand back a tuple or dict of several outputs, keyed
    alike, on every return."""
    methods = {method.name: method for method in node.body if isinstance(method, ast.FunctionDef)}
    forward = methods.get("forward")
    outputs = _returned_outputs(forward) if forward is not None and parts else {}
    if forward is None or not outputs:
        return {}
    reach = _Reach(forward, methods)
    return {key: frozenset(part for value in values for part in reach.attributes(value) & parts)
            for key, values in outputs.items()}


def submodules(class_node: ast.ClassDef, qualify: Callable[[str], str], local_classes: set[str]) -> set[str]:
    """`self.X = nn.Linear(...)`, `self.X = Block(...)`: attributes that hold parameters.
    Activations, dropout, pooling and losses hold none."""
    found: set[str] = set()
    for method in class_node.body:
        if not isinstance(method, ast.FunctionDef):
            continue
        for node in ast_walk.walk(method):
            if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Call):
                continue
            called = dotted_ast(node.value.func)
            if called is None:
                continue
            qualified = qualify(called)
            holds_parameters = called in local_classes or (
                qualified.startswith("torch.nn.") and qualified not in names.PARAMETERLESS_LAYERS
                and not qualified.endswith("Loss"))
            if not holds_parameters:
                continue
            found |= {target.attr for target in node.targets if isinstance(target, ast.Attribute)
                      and isinstance(target.value, ast.Name) and target.value.id == "self"}
    return found


def _returned_outputs(forward: ast.FunctionDef) -> dict[OutputKey, list[ast.expr]]:
    """The outputs every `return` of forward builds alike, each with its value on every
    return: `return a, b` (positions) or `return {"a": ..., "b": ...}` (keys). Empty for
    anything else, and when the returns disagree (`return logits` on one path, `return
    logits, aux` on another: _report_parts_run_on_some_calls's case)."""
    shapes: list[dict[OutputKey, ast.expr]] = []
    for node in _own_nodes(forward):
        if not isinstance(node, ast.Return):
            continue
        shape = _output_shape(node.value)
        if shape is None:
            return {}
        shapes.append(shape)
    if not shapes or any(shape.keys() != shapes[0].keys() for shape in shapes):
        return {}
    return {key: [shape[key] for shape in shapes] for key in shapes[0]}


def _output_shape(value: Optional[ast.expr]) -> Optional[dict[OutputKey, ast.expr]]:
    if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) > 1 and not any(
            isinstance(element, ast.Starred) for element in value.elts):
        return dict(enumerate(value.elts))
    if isinstance(value, ast.Dict) and len(value.keys) > 1:
        keys = [key.value for key in value.keys if isinstance(key, ast.Constant) and isinstance(key.value, str)]
        if len(keys) == len(value.keys):
            return dict(zip(keys, value.values))
    return None


class _Reach:
    """The `self` attributes a value of forward is computed from: through the local names it
    reads (every assignment of each, wherever it is: a name rebound on a later line counts
    with all its values, which can only make an output reach more) and the class's own
    methods it calls (`self.classify(h)`)."""

    def __init__(self, forward: ast.FunctionDef, methods: Mapping[str, ast.FunctionDef]) -> None:
        self._methods = methods
        self._assigned: dict[str, list[ast.AST]] = {}
        for node in _own_nodes(forward):
            for target, value in _bindings(node):
                for name in ast_walk.walk(target):
                    if isinstance(name, ast.Name):
                        self._assigned.setdefault(name.id, []).append(value)

    def attributes(self, value: ast.AST) -> set[str]:
        found: set[str] = set()
        seen_names: set[str] = set()
        seen_methods: set[str] = set()
        work: list[ast.AST] = [value]
        while work:
            for node in ast_walk.walk(work.pop()):
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                    found.add(node.attr)
                    method = self._methods.get(node.attr)
                    if method is not None and node.attr not in seen_methods:
                        seen_methods.add(node.attr)
                        work.append(method)
                elif isinstance(node, ast.Name) and node.id not in seen_names:
                    seen_names.add(node.id)
                    work.extend(self._assigned.get(node.id, ()))
        return found


def _bindings(node: ast.AST) -> list[tuple[ast.AST, ast.AST]]:
    """(target, value) of the statements that bind local names: an in-place `x += f(x)` keeps
    the old value too, a loop variable comes from what it iterates."""
    if isinstance(node, ast.Assign):
        return [(target, node.value) for target in node.targets]
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)) and node.value is not None:
        return [(node.target, node.value)]
    if isinstance(node, (ast.For, ast.comprehension)):
        return [(node.target, node.iter)]
    if isinstance(node, ast.withitem) and node.optional_vars is not None:
        return [(node.optional_vars, node.context_expr)]
    if isinstance(node, ast.NamedExpr):
        return [(node.target, node.value)]
    # `x.add_(self.bias)`, `feats.append(self.head(h))`: the object takes in what is put into it.
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Attribute):
        return [(node.value.func.value, node.value)]
    return []


def _own_nodes(function: ast.FunctionDef) -> list[ast.AST]:
    """The nodes of a function, not those of the functions and lambdas defined in it."""
    found: list[ast.AST] = []
    work: list[ast.AST] = list(function.body)
    while work:
        node = work.pop()
        found.append(node)
        work.extend(child for child in ast_walk.child_nodes(node)
                    if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)))
    return found

