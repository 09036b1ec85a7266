"""A loop every rank runs whose end only rank 0 can bring about (DDP952).

Rule (conservative, stdlib `ast` only): a `while` loop that no rank-0 guard encloses ends when
its test turns false; where every statement of its body that changes a name the test reads
(`checkpoints.pop(0)`, `saved = saved[1:]`, `done = True`, `del recent[0]`) sits under a
rank-0 guard, the other ranks go round it forever: `while len(saved) > keep: if is_main:
os.remove(saved.pop(0))`. Only where the body holds no `break`, `return` or `raise` on every
rank (another way out) and the test reads no call's result but a length's (a folder listed
again may change under rank 0's deletes on a shared file system).
"""
import ast
from collections.abc import Iterator
from typing import Optional

from ddpify import ast_walk
from ddpify.selfcheck.source import FUNCTIONS, Source, dotted

Finding = tuple[str, int, str]

# Calls in a test whose result only the names they are handed decide.
_PURE_IN_A_TEST = frozenset({"len", "sum", "min", "max", "any", "all", "sorted", "list", "abs", "int", "float"})


def loops_ended_by_rank0_alone(migrated: Source) -> Iterator[Finding]:
    for loop in ast_walk.walk(migrated.tree):
        if not isinstance(loop, ast.While) or migrated.guarded(loop):
            continue
        read = _names_read(loop.test)
        if read is None or not read:
            continue
        body = [node for statement in loop.body for node in _walk_body(statement)]
        if any(isinstance(node, (ast.Break, ast.Return, ast.Raise)) and not migrated.guarded(node) for node in body):
            continue
        changes = [(node, name) for node in body if isinstance(node, (ast.stmt, ast.expr))
                   and (name := _changed(node, read)) is not None]
        if changes and all(migrated.guarded(change) for change, _name in changes):
            names = ", ".join(f"`{name}`" for name in sorted({name for _change, name in changes}))
            yield ("DDP952", loop.lineno, f"the loop ends when its test turns false, and only rank 0 changes "
                   f"{names} in it (line {changes[0][0].lineno}): every other rank loops forever")


def _names_read(test: ast.expr) -> Optional[set[str]]:
    """The names (and dotted attributes) the test reads, or None where it calls anything but
    _PURE_IN_A_TEST (its value may change with no statement of the body)."""
    names: set[str] = set()
    for node in ast_walk.walk(test):
        if isinstance(node, ast.Call) and dotted(node.func) not in _PURE_IN_A_TEST:
            return None
        if isinstance(node, ast.NamedExpr):
            return None
        if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load):
            name = dotted(node)
            if name is not None and name not in _PURE_IN_A_TEST:
                names.add(name)
    return names


def _walk_body(statement: ast.stmt) -> Iterator[ast.AST]:
    """The nodes of a statement of the loop's body, not those of a function defined there."""
    if isinstance(statement, (*FUNCTIONS, ast.ClassDef, ast.Lambda)):
        return
    yield statement
    for child in ast.iter_child_nodes(statement):
        if isinstance(child, ast.stmt):
            yield from _walk_body(child)
        elif not isinstance(child, ast.Lambda):
            yield from ast_walk.walk(child)


def _changed(node: ast.AST, names: set[str]) -> Optional[str]:
    """The one of `names` that `node` binds (or an item of), or calls a method on; else None."""
    changed: Optional[str] = None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        changed = dotted(node.func.value)
    elif isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)) and isinstance(node.ctx, (ast.Store, ast.Del)):
        target: ast.expr = node
        while isinstance(target, ast.Subscript):
            target = target.value
        changed = dotted(target)
    return changed if changed in names else None
