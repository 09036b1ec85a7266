"""Values a training function of another module picks from its own batches (an LR finder's
`lrs[best_i]`), read on its `ast` (effects.py): under DDP each rank sees its own batches, so
what is picked from them differs per rank, and a caller that sets a training setting from it
(`group["lr"] = suggested_lr`) drifts its replicas apart (report_only.py, DDP408).

Rule, read with certainty only: a name is per-rank when a loop of the function binds it from
what it iterates (not a `range` count, not `enumerate`'s index) or from `next(...)`, and so is
what is assigned from a per-rank name, or appended to a list from one. A name is picked when it
is assigned under an `if` whose test reads a per-rank name (`if loss < best: best_i = i`),
from a per-rank value through min/max/argmin/argmax/index/sorted, or from a picked name. The
positions of the function's return that read a picked name are the answer; a function that
returns only per-rank sums (an epoch loss, which the module's own migration may share) is not
picked from.
"""
import ast
from typing import Optional

from ddpify import ast_walk
from ddpify.analysis.ast_names import dotted_ast

PICKING = frozenset({"min", "max", "argmin", "argmax", "index", "sorted", "nanargmin", "nanargmax"})
ROUNDS = 4


def picked_positions(function: ast.FunctionDef) -> set[Optional[int]]:
    """None when the whole returned value is picked, k for the k-th element of a tuple."""
    per_rank = _from_batches(function)
    if not per_rank:
        return set()
    picked: set[str] = set()
    for _ in range(ROUNDS):
        for node in ast_walk.walk(function):
            _spread(node, per_rank, picked)
    positions: set[Optional[int]] = set()
    for node in ast_walk.walk(function):
        if not isinstance(node, ast.Return) or node.value is None:
            continue
        if isinstance(node.value, ast.Tuple):
            positions |= {index for index, element in enumerate(node.value.elts)
                          if _is_picked(element, per_rank, picked)}
        elif _is_picked(node.value, per_rank, picked):
            positions.add(None)
    return positions


def _is_picked(value: ast.expr, per_rank: set[str], picked: set[str]) -> bool:
    read = _names(value)
    return bool(read & picked or read & per_rank and _picks(value))


def _from_batches(function: ast.FunctionDef) -> set[str]:
    found: set[str] = set()
    for node in ast_walk.walk(function):
        if isinstance(node, ast.For):
            called = dotted_ast(node.iter.func) if isinstance(node.iter, ast.Call) else None
            target = node.target
            if called == "range":
                continue
            if called == "enumerate" and isinstance(target, ast.Tuple) and len(target.elts) == 2:
                target = target.elts[1]
            found |= _bound(target)
        elif isinstance(node, ast.Assign) and any(
                isinstance(call, ast.Call) and dotted_ast(call.func) == "next" for call in ast_walk.walk(node.value)):
            found |= _targets(node)
    return found


def _spread(node: ast.AST, per_rank: set[str], picked: set[str]) -> None:
    if isinstance(node, (ast.If, ast.While)) and _names(node.test) & per_rank:
        for statement in [*node.body, *node.orelse]:
            for inner in ast_walk.walk(statement):
                targets = _targets(inner)
                picked |= targets
                per_rank |= targets
        return
    targets = _targets(node)
    value = getattr(node, "value", None)
    if targets and isinstance(value, ast.expr):
        if _is_picked(value, per_rank, picked):
            picked |= targets
        if _names(value) & per_rank:
            per_rank |= targets
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("append", "extend") \
            and isinstance(node.func.value, ast.Name) and any(_names(arg) & per_rank for arg in node.args):
        per_rank.add(node.func.value.id)


def _picks(value: ast.expr) -> bool:
    """min/max/argmin/argmax/index/sorted of something (`lrs[losses.index(min(losses))]`)."""
    for node in ast_walk.walk(value):
        if isinstance(node, ast.Call):
            called = dotted_ast(node.func) or ""
            if called.rpartition(".")[2] in PICKING:
                return True
    return False


def _targets(node: ast.AST) -> set[str]:
    """The bare names an assignment binds (an attribute or item it writes is not followed)."""
    if isinstance(node, ast.Assign):
        return {name for target in node.targets for name in _bound(target)}
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return _bound(node.target)
    return set()


def _bound(target: ast.expr) -> set[str]:
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return {name for element in target.elts for name in _bound(element)}
    return set()


def _names(node: ast.AST) -> set[str]:
    """The bare names an expression or target reads (`self.lr` counts as `self`: the object
    is not followed)."""
    return {each.id for each in ast_walk.walk(node) if isinstance(each, ast.Name)}
