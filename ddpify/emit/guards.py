"""The rank-0 guards as they are written out: one guard around a loop or a with whose
every statement is guarded alike (and around a `while` that a guarded statement ends), and
none inside another."""
from collections.abc import Set as AbstractSet

import libcst as cst

from ddpify.analysis.effects import LOG_METHODS
from ddpify.analysis.nodes import dotted_name, find_all
from ddpify.emit.edits import Edits

# Calls a `while` test may make and still only read (by the last part of their name): lengths
# and sums of lists, and what is in a folder.
_READING_IN_A_TEST = frozenset({
    "len", "sum", "min", "max", "any", "all", "sorted", "list", "exists", "isdir", "isfile", "listdir", "glob",
    "iglob", "getsize", "getmtime", "is_file", "is_dir", "iterdir", "stat",
})


def fold_into_loops_and_withs(edits: Edits, keep_inside: AbstractSet[cst.For]) -> None:
    """`for name, p in model.named_parameters(): writer.add_histogram(...)` becomes one guard
    around the loop rather than a guard inside it. Innermost first, so nesting folds up; never
    around a loop in `keep_inside` (a training loop, whose steps every rank takes).

    A `while` too, where its test only reads (`while len(checkpoints) > keep:
    os.remove(checkpoints.pop(0))`): with the guard inside, the statement that brings the test
    to its end (the pop) would run on rank 0 alone, and every other rank would loop forever."""
    changed = True
    while changed:
        changed = False
        for statement in list(edits.guarded):
            parent = edits.facts.parents.get(statement)
            compound = edits.facts.parents.get(parent) if parent is not None else None
            if not isinstance(compound, (cst.For, cst.With, cst.While)) or compound.body is not parent:
                continue
            block = compound.body
            if isinstance(compound, (cst.For, cst.While)) and compound.orelse is not None:
                continue
            if isinstance(compound, cst.While) and not _only_reads(compound.test):
                continue
            if compound in edits.guarded or compound in keep_inside:
                continue
            guards = {edits.guarded.get(inner) for inner in block.body}
            if len(guards) != 1 or None in guards or any(
                inner in edits.before or inner in edits.after or inner in edits.replaced
                for inner in block.body
            ):
                continue
            guard = guards.pop()
            assert guard is not None  # ruled out just above
            for inner in block.body:
                del edits.guarded[inner]
            edits.guarded[compound] = guard
            changed = True


def guard_loops_ended_by_a_guarded_statement(edits: Edits) -> None:
    """`while len(checkpoints) > keep: os.remove(checkpoints.pop(0)); logger.info("removed")`:
    the guarded delete also ends the loop (it pops what the test counts), and the log line
    beside it keeps the loop from folding whole. With the guard inside, the other ranks would
    never pop and loop forever; so the guard goes around the whole loop, where every other
    statement of its body only tells (a log call, a print: rank 0's output anyway) and its test
    only reads. Elsewhere the loop stays as it is and the self-check says so (DDP952)."""
    for loop in edits.facts.nodes_of(cst.While):
        if loop in edits.guarded or loop.orelse is not None or not _only_reads(loop.test) \
                or not isinstance(loop.body, cst.IndentedBlock):
            continue
        counted = {name for node in find_all(loop.test, cst.Name) + find_all(loop.test, cst.Attribute)
                   if (name := dotted_name(node)) is not None}
        inside = loop.body.body
        guarded = [statement for statement in inside if statement in edits.guarded]
        guards = {edits.guarded[statement] for statement in guarded}
        if len(guards) != 1 or not any(_changes_any(statement, counted) for statement in guarded) or any(
                statement not in edits.guarded and not _only_tells(statement) for statement in inside) or any(
                statement in edits.before or statement in edits.after or statement in edits.replaced
                for statement in inside):
            continue
        for statement in guarded:
            del edits.guarded[statement]
        edits.guarded[loop] = guards.pop()


def _changes_any(statement: cst.CSTNode, names: set[str]) -> bool:
    """A method called on one of the names (`checkpoints.pop(0)`), or one of them bound."""
    return any(isinstance(call.func, cst.Attribute) and dotted_name(call.func.value) in names
               for call in find_all(statement, cst.Call)) or any(
        dotted_name(target.target) in names for target in find_all(statement, cst.AssignTarget)) or any(
        dotted_name(assign.target) in names for assign in find_all(statement, cst.AugAssign))


def _only_tells(statement: cst.BaseStatement) -> bool:
    """A line of log calls or prints (`logger.info(...)`, `print(...)`), or `pass`."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    for small in statement.body:
        if isinstance(small, cst.Pass):
            continue
        if not isinstance(small, cst.Expr) or not isinstance(small.value, cst.Call):
            return False
        func = small.value.func
        if not (isinstance(func, cst.Name) and func.value == "print" or isinstance(func, cst.Attribute)
                and func.attr.value in LOG_METHODS):
            return False
    return True


def _only_reads(test: cst.BaseExpression) -> bool:
    """A `while` test that rank 0 alone may run: no `:=`, no call but _READING_IN_A_TEST's."""
    return not find_all(test, cst.NamedExpr) and all(
        (dotted_name(call.func) or "").rpartition(".")[2] in _READING_IN_A_TEST for call in find_all(test, cst.Call))


def drop_guards_inside_guards(edits: Edits) -> None:
    """A statement inside a guarded one needs no guard of its own."""
    for statement in list(edits.guarded):
        parent = edits.facts.parents.get(statement)
        while parent is not None:
            if parent in edits.guarded:
                del edits.guarded[statement]
                break
            parent = edits.facts.parents.get(parent)
