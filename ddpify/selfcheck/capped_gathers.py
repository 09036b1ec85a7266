"""A gathered evaluation whose loop stops after a count of batches on each rank (DDP947).

Rule (conservative, stdlib `ast` only): an evaluation loop (no gradients, stepping nothing, adding
up or listing figures) that takes at most k batches (`zip(range(k), loader)`, `islice(loader, k)`,
`for _ in range(k): next(batches)`, or a `break` under a test of a name the loop sets, `if i >=
k: break`) and whose figures are handed to a gather in its scope (`every_rank(...)`, `all_reduce(...)`) gives,
once its loader is sharded, a figure over N times k batches where one process evaluated k. A
break under a test of names the loop does not set (`if args.dry_run: break`) ends every rank's
loop after its first batch: it is fine only where the gather then keeps rank 0's batch alone
(`shares = shares[:1]`), as ddpify writes it (DDP417).
"""
import ast
from collections.abc import Iterator
from typing import Optional, Union

from ddpify import ast_walk
from ddpify.selfcheck.shared_figures import GATHERS, _without_gradients
from ddpify.selfcheck.source import FUNCTIONS, Source, dotted, last_part
from ddpify.selfcheck.stepped_passes import Function

Finding = tuple[str, int, str]
Loop = Union[ast.For, ast.AsyncFor]
# evaluation_share reads the loader; it gathers nothing.
FIGURE_GATHERS = GATHERS - {"evaluation_share"}


def gathered_capped_figures(migrated: Source) -> Iterator[Finding]:
    for loop in migrated.nodes:
        if not isinstance(loop, (ast.For, ast.AsyncFor)):
            continue
        cap = _cap(loop)
        if cap is None:
            continue
        function = next((each for each in migrated.ancestors(loop)
                         if isinstance(each, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
        scope = function if function is not None else migrated.tree
        if not _evaluates(migrated, loop, function) or not _figures_of(loop) & _gathered_after(scope, loop):
            continue
        if cap == "flag" and _keeps_the_first_share(scope):
            continue
        what = "a `break` under a flag, with every rank's first batch gathered" if cap == "flag" else f"`{cap}`"
        yield ("DDP947", loop.lineno, f"this loop stops after a count of batches ({what}) and its figures "
               "are gathered: each rank counts its own share, so the figure covers N times the batches "
               "one process evaluates")


def _evaluates(source: Source, loop: Loop, function: Optional[Function]) -> bool:
    """No gradients, and nothing stepped or backpropagated in the loop."""
    if any(isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
           and node.func.attr in ("step", "backward") for node in ast_walk.walk(loop)):
        return False
    return _without_gradients(source, loop, function)


def _cap(loop: Loop) -> Optional[str]:
    """What ends the loop before its loader does: `zip(range(...))`, `islice`, a `break` on a
    value the loop sets ("break"), or one on values it does not ("flag"); None."""
    for node in ast_walk.walk(loop.iter):
        if isinstance(node, ast.Call) and last_part(node.func) == "islice":
            return "islice"
        if isinstance(node, ast.Call) and last_part(node.func) == "zip" and any(
                isinstance(arg, ast.Call) and last_part(arg.func) == "range" for arg in node.args):
            return "zip(range(...))"
    if isinstance(loop.iter, ast.Call) and last_part(loop.iter.func) == "range" and not any(
            isinstance(node, ast.Call) and last_part(node.func) == "len" for node in ast_walk.walk(loop.iter)) and any(
            isinstance(node, ast.Call) and dotted(node.func) == "next" for node in ast_walk.walk(loop)):
        return "next() in a loop over range(...)"
    set_in_loop = _names_set(loop)
    kinds = {_break_kind(loop, node, set_in_loop) for node in _own_breaks(loop)}
    return "break" if "break" in kinds else "flag" if kinds else None


def _own_breaks(loop: Loop) -> Iterator[ast.Break]:
    pending: list[ast.AST] = list(loop.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Break):
            yield node
        elif not isinstance(node, (ast.For, ast.AsyncFor, ast.While, *FUNCTIONS, ast.Lambda, ast.ClassDef)):
            pending.extend(ast.iter_child_nodes(node))


def _break_kind(loop: Loop, node: ast.Break, set_in_loop: set[str]) -> str:
    """"break" when a test above it reads a name the loop sets or calls something, "flag"."""
    for test in _tests_above(loop, node):
        names = {dotted(each) for each in ast_walk.walk(test) if isinstance(each, ast.Name)}
        if names & set_in_loop or any(isinstance(each, ast.Call) for each in ast_walk.walk(test)):
            return "break"
    return "flag"


def _tests_above(loop: Loop, node: ast.Break) -> list[ast.expr]:
    tests: list[ast.expr] = []
    pending: list[tuple[ast.AST, list[ast.expr]]] = [(statement, []) for statement in loop.body]
    while pending:
        current, above = pending.pop()
        if current is node:
            return above
        inner = [*above, current.test] if isinstance(current, ast.If) else above
        pending.extend((child, inner) for child in ast.iter_child_nodes(current))
    return tests


def _names_set(loop: Loop) -> set[str]:
    found = {node.id for node in ast_walk.walk(loop.target) if isinstance(node, ast.Name)}
    for node in ast_walk.walk(loop):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.add(node.id)
    return found


def _figures_of(loop: Loop) -> set[str]:
    """`total += ...`, `losses.append(...)`: the names the loop adds up or fills."""
    found: set[str] = set()
    for node in ast_walk.walk(loop):
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            found.add(node.target.id)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("append", "extend") and isinstance(node.func.value, ast.Name):
            found.add(node.func.value.id)
    return found


def _gathered_after(scope: ast.AST, loop: Loop) -> set[str]:
    """The names handed to a gather below the loop in its scope."""
    return {each.id for node in ast_walk.walk(scope)
            if isinstance(node, ast.Call) and last_part(node.func) in FIGURE_GATHERS and node.lineno > loop.lineno
            for argument in node.args for each in ast_walk.walk(argument) if isinstance(each, ast.Name)}


def _keeps_the_first_share(scope: ast.AST) -> bool:
    """`shares = shares[:1]`: the gather keeps rank 0's figures."""
    return any(isinstance(node, ast.Assign) and isinstance(node.value, ast.Subscript)
               and isinstance(node.value.slice, ast.Slice) and node.value.slice.lower is None
               and isinstance(node.value.slice.upper, ast.Constant) and node.value.slice.upper.value == 1
               for node in ast_walk.walk(scope))
