"""sampler.set_epoch(epoch) where each new pass over a sharded loader begins (DDP202, DDP211)."""
from typing import cast

import libcst as cst

from ddpify.analysis.control import Facts
from ddpify.analysis.facts import Loader, Statement
from ddpify.analysis.nodes import dotted_name
from ddpify.diagnostics import Rule, Severity
from ddpify.emit.edits import Edits, Insertion
from ddpify.rules.cases import TRAINING, Emits, Silent

RULES = (
    Rule("DDP202", Severity.EDIT, "sampler.set_epoch(epoch) at the top of the epoch loop",
         "DistributedSampler seeds its shuffle with the epoch; without set_epoch every epoch "
         "repeats the same order.",
         "Nothing to do."),
    Rule("DDP211", Severity.WARNING, "no epoch loop found for set_epoch",
         "DistributedSampler shuffles with a seed derived from the epoch; without "
         "set_epoch(epoch) every epoch repeats the same order.",
         "Call sampler.set_epoch(epoch) at the start of every epoch."),
)

SET_EPOCH_CODE = "if {sampler} is not None:\n    {sampler}.set_epoch({epoch})\n"


# A RandomSampler kept for plain `python` has no set_epoch.
SET_EPOCH_IF_DISTRIBUTED_CODE = "if distributed:\n    {sampler}.set_epoch({epoch})\n"


SET_EPOCH_VIA_LOADER_CODE = (
    "if isinstance({loader}.sampler, DistributedSampler):\n    {loader}.sampler.set_epoch({epoch})\n"
)


def set_epoch(facts: Facts, edits: Edits, loader: Loader, sampler: str,
               template: str = SET_EPOCH_CODE) -> None:
    """At the top of the epoch loop: the loop around the pass over the loader, which may sit
    in another function than the loader (`for epoch ...: train(model, train_loader)`)."""
    for pass_loop, name_there in facts.epoch_loops(loader.name, loader.function):
        # `for epoch ...: for fold, (train_ids, val_ids) in ...:` the epoch is further out.
        epoch_loop = next((loop for loop in [pass_loop, *facts.enclosing_loops(pass_loop)]
                           if isinstance(loop.target, cst.Name)), None)
        if epoch_loop is None:
            continue
        epoch = cast(cst.Name, epoch_loop.target).value
        if sampler.startswith("self.") or facts.function_of(epoch_loop) is loader.function:
            code = template.format(sampler=sampler, epoch=epoch)
        else:
            # The sampler variable is not in scope here; the loader still carries it.
            code = SET_EPOCH_VIA_LOADER_CODE.format(loader=name_there, epoch=epoch)
        if facts.ancestor_in(loader.statement, epoch_loop.body) is not None:
            # A loader built anew each epoch: its sampler learns the epoch where it is made.
            edits.insert_after(loader.statement, edits.statements(code))
        else:
            first = epoch_loop.body.body[0]
            edits.insert_before(first, Insertion(edits.statements(code)))
        edits.report("DDP202", epoch_loop)
        return
    # `while step < max_steps: for batch in loader:`, or `except StopIteration: it =
    # iter(loader)`: each new pass is an epoch, counted on the sampler itself.
    passes = [loop.body.body[0] for loop in _while_loops_around_passes(facts, loader)]
    passes += _iterators_restarted_in_training(facts, loader)
    for new_pass in passes:
        code = template.format(sampler=sampler, epoch=f"{sampler}.epoch + 1")
        edits.insert_before(new_pass, Insertion(edits.statements(code)))
        edits.report("DDP202", new_pass)
    if not passes:
        edits.report("DDP211", loader.call)


def _while_loops_around_passes(facts: Facts, loader: Loader) -> list[cst.While]:
    """While loops around a pass over the loader in its own function, with no for loop
    between them (that would be the epoch loop)."""
    found: list[cst.While] = []
    for loop in facts.loops_over.get(loader.name, ()):
        if facts.function_of(loop) is not loader.function:
            continue
        parent = facts.parents.get(loop)
        while parent is not None and not isinstance(parent, (cst.FunctionDef, cst.For)):
            if isinstance(parent, cst.While) and parent not in found:
                found.append(parent)
                break
            parent = facts.parents.get(parent)
    return found


def _iterators_restarted_in_training(facts: Facts, loader: Loader) -> list[Statement]:
    """The statements in a training loop that start a new pass over the loader with iter():
    a step loop that takes its batches with next() and starts over when they run out."""
    return [facts.statement_of(call) for call in facts.calls_named.get("builtins.iter", ())
            if call.args and dotted_name(call.args[0].value) == loader.name
            and facts.function_of(call) is loader.function
            and any(facts.loop_trains(loop) for loop in facts.enclosing_loops(call))]


CASES = (
    Emits(TRAINING, "DDP202", ("sampler.set_epoch(epoch)",)),
    Emits(TRAINING.replace("for epoch in range(3):\n", "if True:\n"), "DDP211"),
    Silent(TRAINING, "DDP211"),
)
