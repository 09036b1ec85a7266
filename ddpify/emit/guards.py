"""The rank-0 guards as they are written out: one guard around a loop or a with whose
every statement is guarded alike, and none inside another."""
from collections.abc import Set as AbstractSet

import libcst as cst

from ddpify.emit.edits import Edits


def fold_into_loops_and_withs(edits: Edits, keep_inside: AbstractSet[cst.For]) -> None:
    """`for name, p in model.named_parameters(): writer.add_histogram(...)` becomes one guard
    around the loop rather than a guard inside it. Innermost first, so nesting folds up; never
    around a loop in `keep_inside` (a training loop, whose steps every rank takes)."""
    changed = True
    while changed:
        changed = False
        for statement in list(edits.guarded):
            parent = edits.facts.parents.get(statement)
            compound = edits.facts.parents.get(parent) if parent is not None else None
            if not isinstance(compound, (cst.For, cst.With)) or compound.body is not parent:
                continue
            block = compound.body
            if isinstance(compound, cst.For) and compound.orelse is not None:
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


def drop_guards_inside_guards(edits: Edits) -> None:
    """A statement inside a guarded one needs no guard of its own."""
    for statement in list(edits.guarded):
        parent = edits.facts.parents.get(statement)
        while parent is not None:
            if parent in edits.guarded:
                del edits.guarded[statement]
                break
            parent = edits.facts.parents.get(parent)
