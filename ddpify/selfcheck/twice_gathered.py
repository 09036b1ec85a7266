"""A figure gathered from every rank twice over one count (DDP955).

Rule (conservative, stdlib `ast` only): in one block of statements, a statement that gathers
names from every rank (`shares = every_rank((correct, total))`, `dist.all_reduce(total)`) and,
further down the same block, another that gathers one of the same names, with no statement
between them that binds the name again (a new count, a loop adding to it). The first gather
made the name every rank's sum; the second sums those sums, so a count comes out N times too
large (`accuracy 76/40` on 2 ranks). A name the second statement builds itself before its gather
(`totals = torch.tensor([...])`, then `dist.all_reduce(totals)`) is a new value, not read again.
"""
import ast
import bisect
from collections.abc import Iterator, Sequence

from ddpify import ast_walk
from ddpify.selfcheck.source import FUNCTIONS, LOOPS, Source, assigned_targets, dotted, last_part

Finding = tuple[str, int, str]
# The gathers whose arguments are the figures they sum or collect (evaluation_share reads a loader).
FIGURE_GATHERS = frozenset({"every_rank", "all_reduce", "all_gather_object", "all_gather", "reduce"})
_BLOCK_FIELDS = ("body", "orelse", "finalbody")


def figures_gathered_twice(migrated: Source) -> Iterator[Finding]:
    # The lines of the gathers: a statement that spans none of them gathers nothing, and is not
    # walked (each block's statements hold the nested blocks, read again at each level).
    gather_lines = sorted({node.lineno for node in migrated.nodes
                           if isinstance(node, ast.Call) and last_part(node.func) in FIGURE_GATHERS})
    if not gather_lines:
        return
    for node in migrated.nodes:
        for field in _BLOCK_FIELDS:
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                yield from _in_block(block, gather_lines)


def _spans_a_line(statement: ast.stmt, lines: Sequence[int]) -> bool:
    index = bisect.bisect_left(lines, statement.lineno)
    return index < len(lines) and lines[index] <= (statement.end_lineno or statement.lineno)


def _in_block(block: list[ast.stmt], gather_lines: Sequence[int]) -> Iterator[Finding]:
    gathered = [_gathered_names(statement) if _spans_a_line(statement, gather_lines) else set()
                for statement in block]
    for first, names in enumerate(gathered):
        if not names:
            continue
        for later in range(first + 1, len(block)):
            again = names & gathered[later]
            if again:
                name = sorted(again)[0]
                yield ("DDP955", block[later].lineno,
                       f"`{name}` is gathered from every rank at line {block[first].lineno} and again here, with "
                       "nothing counting it anew between: the second gather sums the ranks' sums, N times the figure")
                break
            names = names - _bound_names(block[later])
            if not names:
                break


def _gathered_names(statement: ast.stmt) -> set[str]:
    """The names a statement hands to a gather (outside loops and definitions within it), less
    those it binds itself before that gather."""
    found: set[str] = set()
    for call in _calls_outside_loops(statement):
        if last_part(call.func) not in FIGURE_GATHERS:
            continue
        read = {dotted(node) for argument in call.args for node in ast_walk.walk(argument)
                if isinstance(node, (ast.Name, ast.Attribute))}
        built_before = {name for node in ast_walk.walk(statement) if isinstance(node, (ast.Assign, ast.AugAssign))
                        and node.lineno < call.lineno for name in assigned_targets(node)}
        found |= {name for name in read if name and not name.startswith(("dist.", "torch."))} - built_before
    return found


def _calls_outside_loops(statement: ast.stmt) -> Iterator[ast.Call]:
    work: list[ast.AST] = [statement]
    while work:
        node = work.pop()
        if node is not statement and isinstance(node, (*LOOPS, *FUNCTIONS, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Call):
            yield node
        work.extend(ast.iter_child_nodes(node))


def _bound_names(statement: ast.stmt) -> set[str]:
    """Every name the statement binds anywhere inside it (a reset, a loop adding to it)."""
    return {name for node in ast_walk.walk(statement) if isinstance(node, ast.stmt)
            for name in assigned_targets(node)}
