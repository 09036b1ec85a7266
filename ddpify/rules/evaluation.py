"""Evaluation on N ranks: each rank takes whole batches of the evaluation set in turn, and the
figures the loop adds up are gathered once after it (DDP203, DDP215, DDP216).

DistributedSampler pads the last round with repeated samples, so counts and accuracies
drift; here no sample is seen twice. Because the ranks take the one-process batches
themselves (rank r gets batches r, r + N, ...), a mean of per-batch means is exact too once
the batch counts are gathered. An evaluation loop is sharded only when everything it leaves
behind is a figure ddpify can gather: sums of Python numbers, batch counts, and lists of
per-batch results; anything else (a metric object, the last batch, an early break) keeps
the whole set on every rank, as before, and says why.
"""
from typing import Optional

import libcst as cst

from ddpify.analysis import names
from ddpify.analysis.control import Facts, handed_in, only_peeked
from ddpify.analysis.facts import ExternalLoader, Holder, Loader
from ddpify.analysis.figures import Figures, figures_of, loader_name_in
from ddpify.analysis.nodes import (
    argument_for,
    calls_within,
    dotted_name,
    find_all,
    parameter_names,
    string_value,
    yields_each_batch,
)
from ddpify.analysis.values import keyword_names, known_dict_keys
from ddpify.diagnostics import Rule, Severity
from ddpify.emit import collectives
from ddpify.emit.edits import Edits, Insertion
from ddpify.options import Options
from ddpify.plan import Plan
from ddpify.rules import data
from ddpify.rules.cases import TRAINING, Emits, Silent

FIRST_BATCH_SUMMARY = "evaluation stopped after its first batch under a flag: rank 0's figures kept"
RULES = (
    Rule("DDP203", Severity.INFO, "evaluation loader left unsharded: every rank evaluates the full set",
         "ddpify shards an evaluation only when it can gather everything the loop leaves "
         "behind (sums of numbers, batch counts, per-batch lists) and the loop runs without "
         "gradients; the message says what stopped it. Whole, the figures stay exact but "
         "every rank does the whole evaluation.",
         "Fine as is; to shard it, keep the figures as sums (or use a metric that syncs "
         "across ranks)."),
    Rule("DDP215", Severity.EDIT, "evaluation loader sharded: whole batches in turn, none padded",
         "Every rank evaluating the whole set wastes (N-1)/N of the evaluation; "
         "DistributedSampler would pad the last round with repeated samples, so counts and "
         "accuracies would drift. Each rank takes the one-process batches r, r + N, ..., so "
         "every sample is seen once and each batch is the batch one process sees.",
         "Nothing to do; run ddpify with --no-shard-eval to keep the whole set on every rank."),
    Rule("DDP216", Severity.EDIT, "evaluation figures gathered from every rank after the loop",
         "Each rank summed its own batches; the sums, batch counts and per-batch lists are "
         "gathered once, right after the loop, so every rank prints, compares and saves the "
         "figures one process would (best checkpoint, early stopping, LR on plateau agree).",
         "Nothing to do."),
    Rule("DDP228", Severity.INFO, "training loader also evaluated by a loop whose figures are gathered",
         "A helper that measures a model over a loader (`accuracy(model, loader)`) is called with "
         "the training loader as well as an evaluation loader. Under torchrun the training loader "
         "holds this rank's share; the loop's figures are gathered from every rank after it, so "
         "the training-set figures cover the whole set. DistributedSampler repeats up to N-1 "
         "samples to give every rank the same count: where the helper never trains, it reads the "
         "loader it is handed through `evaluation_share`, this rank's batches of the set in order "
         "with none repeated; elsewhere (an evaluation loop over the training loader in the function "
         "that trains on it) the repeated samples are counted too, and the message says so.",
         "Nothing to do; where the message says the repeated samples are counted, evaluate a loader "
         "built without the DistributedSampler for exact figures."),
    Rule("DDP417", Severity.EDIT, FIRST_BATCH_SUMMARY,
         "A break under a test that every rank shares and the loop does not change (`if args.dry_run: "
         "break`) ends the loop after its first batch whenever the test holds. One process then "
         "evaluates batch 0; sharded, each rank evaluates its own first batch, and the gathered figures "
         "would cover N batches. Rank 0's first batch is batch 0 (each rank takes batches r, r + N, ...), "
         "so when the test holds the gather keeps rank 0's figures alone, on every rank; otherwise the "
         "loop covers the set and the gather sums every rank's share.",
         "Nothing to do."),
)
TRAINING_LOADER_GATHERED = "training loader also evaluated by a loop whose figures are gathered"

SHARD_HELPER = '''\


def evaluation_shard(dataset, batch_size):
    """This rank's whole batches of an evaluation set, in turn with the other ranks: each
    sample once, and each batch as one process makes it. None (every rank evaluates the whole
    set) when there are fewer batches than ranks: a rank without a batch would miss the
    buffer broadcast that DDP's first forward makes."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    if len(dataset) <= (world_size - 1) * batch_size:
        return None
    return [i for i in range(len(dataset)) if i // batch_size % world_size == rank]
'''
ORDER_HELPER = '''\


def in_batch_order(shares, size=1):
    """The ranks' lists merged as one process builds them: rank r evaluated batches r,
    r + N, r + 2N, ... and added `size` items for each."""
    chunks = [[share[i : i + size] for i in range(0, len(share), size)] for share in shares]
    turns = itertools.zip_longest(*chunks, fillvalue=[])
    return [item for turn in turns for chunk in turn for item in chunk]
'''
SHARE_HELPER = '''\


def evaluation_share(loader):
    """This rank's whole batches of an evaluation DataLoader built in another module, in turn
    with the other ranks (evaluation_shard), marked `is_rank_share`: its figures are gathered
    after the loop. Also for a loader that module gave a DistributedSampler (a factory that
    shards every split): its set is read in order, without the padding. The loader itself,
    evaluated whole on every rank, outside a process group and when it is not a plain
    DataLoader over its set (a sampler of the user's own)."""
    if getattr(loader, "is_rank_share", False) or not dist.is_initialized():
        return loader
    if getattr(loader, "rank_share", None) is None:
        data = torch.utils.data
        over_set = (data.SequentialSampler, data.DistributedSampler)
        in_order = type(loader) is data.DataLoader and type(loader.sampler) in over_set
        if not in_order or not loader.batch_size:
            return loader
        indices = evaluation_shard(loader.dataset, loader.batch_size)
        if indices is None:
            return loader
        share = data.DataLoader(
            loader.dataset, batch_size=loader.batch_size, sampler=indices,
            num_workers=loader.num_workers, collate_fn=loader.collate_fn,
            pin_memory=loader.pin_memory, drop_last=loader.drop_last, timeout=loader.timeout,
            worker_init_fn=loader.worker_init_fn, prefetch_factor=loader.prefetch_factor,
            persistent_workers=loader.persistent_workers,
            multiprocessing_context=loader.multiprocessing_context,
        )
        share.is_rank_share = True
        loader.rank_share = share  # built once, whatever the number of evaluations
    return loader.rank_share
'''
RECEIVED_SHARE_CONDITION = 'getattr({loader}, "is_rank_share", False)'
RULE_SUMMARY_WHOLE = "evaluation loader left unsharded"
GATHER_COMMENT = "# This rank evaluated its share of the batches: gather the figures once, before use."
FIRST_BATCH_COMMENT = "# The loop stopped after one batch: keep rank 0's, the batch one process evaluates."
# The sampler itself says whether this rank saw a share: a whole set (plain `python`, or fewer
# batches than ranks) gathers nothing.
SHARE_CONDITION = "len({loader}.sampler) < len({loader}.dataset)"
# DataLoader refuses shuffle=True beside a sampler; the order does not change the figures.
DROP_SHUFFLE_CODE = (
    'if {{sampler}} is not None:\n    {kwargs}.pop("shuffle", None)  # a sampler sets the order\n')
# A table of counts summed across ranks; `{share}` is the ranks' copies of it.
TABLE_SUMS = {
    "dict": "{name} = {{key: sum({each}[key] for share in {shares}) for key in {name}}}",
    "list": "{name} = [sum(column) for column in zip(*({each} for share in {shares}))]",
    "matrix": "{name} = [[sum(cells) for cells in zip(*rows)] for rows in zip(*({each} for share in {shares}))]",
    "tensor": "{name} = sum({each} for share in {shares})",
}


def plan(facts: Facts, edits: Edits, setup: Plan) -> None:
    _plan_evaluation_loaders(facts, edits, setup)
    _report_training_loaders_evaluated_here(facts, edits, setup)


def _report_training_loaders_evaluated_here(facts: Facts, edits: Edits, setup: Plan) -> None:
    """Rule: a training loader that an evaluation loop also goes over (`accuracy(model,
    train_loader)` beside `accuracy(model, val_loader)`, a newcomer's train and validation
    accuracy from one helper) is evaluated on this rank's share under its DistributedSampler.
    When that loop's figures are gathered from every rank after it (DDP216: the loop also
    evaluates a sharded evaluation loader, and its gather runs whenever the loader's sampler
    holds less than its data set, which a training loader's DistributedSampler does), every
    rank gets the figures over the whole training set, as one process would (DDP228). A loop
    whose figures are not gathered would give rank 0's share alone (DDP213)."""
    for loader, loops in setup.training_loaders_evaluated:
        first = min(loops, key=facts.line_of)
        if not all(loop in setup.gathered_evaluations for loop in loops):
            edits.report("DDP213", first)
        elif _read_without_padding(facts, edits, loops):
            edits.report("DDP228", first, f"{TRAINING_LOADER_GATHERED}: `{loader.name}` is evaluated on each "
                         "rank's share of its set read in order, without the DistributedSampler's repeated "
                         "samples, and the figures are summed over the ranks")
        else:
            edits.report("DDP228", first, f"{TRAINING_LOADER_GATHERED}: `{loader.name}` is evaluated on each "
                         "rank's share and the figures are summed over the ranks, with up to N-1 samples "
                         "the DistributedSampler repeats to even the shares")


def _read_without_padding(facts: Facts, edits: Edits, loops: list[cst.For]) -> bool:
    """Rule: a training loader's DistributedSampler repeats up to N-1 samples so that every rank
    has as many; gathered, an evaluation over it counts those twice. Where each evaluation loop
    goes over a parameter of a function that never trains (`evaluate(model, loader)`, called
    with the training loader and with the validation loader), the function reads that parameter
    through evaluation_share, as it does for a loader built in another module: a loader with a
    DistributedSampler becomes this rank's whole batches of its set in order, in turn with the
    other ranks, none repeated; any other (the validation loader's own shard, a loader as a
    group of one) stays itself. The gather after the loop then sums each sample once."""
    rebinds: dict[tuple[cst.FunctionDef, str], cst.BaseStatement] = {}
    for loop in loops:
        function = facts.function_of(loop)
        if function is None or any(facts.function_of(other) is function for other in facts.training_loops):
            return False
        name = loader_name_in(facts, loop, parameter_names(function))
        if name is None:
            return False
        rebinds[(function, name)] = _first_reading(function, name)
    for (_, name), statement in rebinds.items():
        edits.insert_before(statement, Insertion(edits.statements(f"{name} = evaluation_share({name})\n")))
    edits.add_helper("evaluation_share", SHARE_HELPER, "dist", "torch")
    edits.add_helper("evaluation_shard", SHARD_HELPER, "dist")
    return True


def _plan_evaluation_loaders(facts: Facts, edits: Edits, setup: Plan) -> None:
    """The loaders no loop trains over (data.py's `evaluation_loaders`): shard those whose
    every loop is an evaluation that can be gathered; the others stay whole (DDP203, with
    the reason)."""
    candidates = setup.evaluation_loaders
    if not edits.options.shard_evaluation:
        for loader in candidates:
            edits.report("DDP203", loader.call)
        return
    if edits.options.fsdp2:
        # Under FSDP2 every forward all-gathers the blocks, a collective: ranks holding
        # unequal numbers of batches (r, r + N, ...) mismatch their collectives (tried: the
        # DDP target's shards of 9 batches on 2 ranks with per-block fully_shard abort on Gloo,
        # "Received data size doesn't match expected size"; NCCL would hang).
        for loader in candidates:
            edits.report("DDP203", loader.call, f"{RULE_SUMMARY_WHOLE}: under FSDP2 each forward is a "
                         "collective, and shards of unequal batch counts would wait on each other")
        return
    loops_of = {id(loader): [loop for loop in facts.loops_over_values(facts.loader_holders_of(loader))
                             if not yields_each_batch(loop, facts.function_of(loop))] for loader in candidates}
    reasons: dict[int, str] = {}
    figures: dict[cst.For, Figures] = {}
    for loader in candidates:
        reason = _figures_or_reason(facts, edits, loader, loops_of[id(loader)], figures)
        if reason is not None:
            reasons[id(loader)] = reason
    _drop_loops_reached_twice(facts, candidates, loops_of, reasons)
    for loader in candidates:
        if id(loader) in reasons:
            edits.report("DDP203", loader.call, f"{RULE_SUMMARY_WHOLE}: {reasons[id(loader)]}")
            continue
        _shard(facts, edits, setup, loader)
        for loop in loops_of[id(loader)]:
            if loop in figures:
                _gather(facts, edits, setup, loop, figures.pop(loop))
                setup.gathered_evaluations.add(loop)
    _plan_received(facts, edits, setup)
    _report_received_training_loaders_evaluated(facts, edits)


def _figures_or_reason(facts: Facts, edits: Edits, loader: Loader, loops: list[cst.For],
                       figures: dict[cst.For, Figures]) -> Optional[str]:
    """Why the loader stays whole, or None with the figures of each of its loops that gathers
    any put in `figures`."""
    reason = _why_whole(facts, edits, loader, loops)
    for loop in loops:
        if reason is not None:
            break
        found = figures_of(facts, loop, _batch_size(facts, edits, loader) or "1")
        if isinstance(found, str):
            reason = found
        elif found.gathers:
            figures[loop] = found
    return reason


def _drop_loops_reached_twice(facts: Facts, candidates: list[Loader], loops_of: dict[int, list[cst.For]],
                              reasons: dict[int, str]) -> None:
    """A loop that another loader (whole, or a training loader) also reaches cannot gather:
    those figures would be counted N times. Drop such loaders until none is left."""
    changed = True
    while changed:
        changed = False
        sharded = [loader for loader in candidates if id(loader) not in reasons]
        for loader in sharded:
            for loop in loops_of[id(loader)]:
                other = _other_value_reaching(facts, loop, [s for s in sharded if s is not loader], loader)
                if other is not None:
                    reasons[id(loader)] = other
                    changed = True
                    break


# --- loaders built in another module ----------------------------------------------------------
# An evaluation over a loader that this module receives (a parameter that a caller in another
# module hands in: `engine.evaluate(model, loader)`; or what a function of another module
# returns: `train_dl, val_dl = data.get_loaders()`) is sharded where it is evaluated, since
# only here are its figures known: the name is rebound to this rank's batches at run time
# (evaluation_share), and the figures are gathered after the loop when it did take a share.
# The module that builds the loader leaves it whole, so no loader is sharded twice, and one
# that is not a plain in-order DataLoader stays whole with nothing gathered.

def _plan_received(facts: Facts, edits: Edits, setup: Plan) -> None:
    reached_from_here = set(facts.loops_over_values(facts.loader_holders()))
    gathered = set(setup.gathered_evaluations)
    for received in _received_loaders(facts):
        holders = facts.holders_from(received.function, received.name)
        loops = facts.loops_over_values(holders)
        if not loops or any(_trains(facts, loop) for loop in loops):
            continue  # never iterated here, or a training loader (data.py, epochs.py)
        figures: dict[cst.For, Figures] = {}
        reason = _received_whole(facts, holders, loops, reached_from_here, figures)
        if reason is None:
            held = {name for _, name in holders}
            _share(facts, edits, received, loops, held)
            for loop, found in figures.items():
                # `evaluate(model, val_loader)` and `evaluate(model, test_loader)`: one loop,
                # gathered once (a second gather would count every figure twice).
                if loop not in gathered:
                    _gather(facts, edits, setup, loop, found, loader_name_in(facts, loop, held))
                    gathered.add(loop)
        elif reason:
            edits.report("DDP203", received.call, f"{RULE_SUMMARY_WHOLE}: {reason}")


TRAINING_LOADER_EVALUATED = "a loader built for training is also used for evaluation"


def _report_received_training_loaders_evaluated(facts: Facts, edits: Edits) -> None:
    """In a helper module, a loader its caller hands in that a function trains over and
    also evaluates a model over (`eval_src(encoder, classifier, data_loader)` every few
    epochs of `train_src`): under torchrun the training loader is this rank's share, so the
    figures of that evaluation would be rank 0's share alone. Said as for a training loader
    evaluated in its own file (DDP213), never left to exit 0."""
    if not facts.library:
        return
    reported: set[cst.For] = set()
    for name, loops in sorted(facts.loops_over.items()):
        for loop in loops:
            function = facts.function_of(loop)
            if function is None or not _trains(facts, loop) or not _received_by(facts, function, name):
                continue
            holders = facts.holders_from(function, name)
            evaluations = [other for other in facts.loops_over_values(holders) if not _trains(facts, other) and any(
                _runs_a_model_over(facts, evaluating, other, holder) and _runs_within(facts, evaluating, function)
                for _, holder in holders for evaluating in [facts.function_of(other)] if evaluating is not None)]
            if evaluations and not reported.intersection(evaluations):
                first = min(evaluations, key=facts.line_of)
                reported.add(first)
                edits.report("DDP213", first, f"{TRAINING_LOADER_EVALUATED}: the loop at line "
                             f"{facts.line_of(loop)} trains on `{name}`, this rank's share under torchrun, "
                             "and this loop evaluates over it, so its figures would be rank 0's share: "
                             "evaluate on a loader built without the DistributedSampler")


def _runs_within(facts: Facts, evaluating: cst.FunctionDef, training: cst.FunctionDef) -> bool:
    """The evaluation runs in the same run as the training: in its function, or in one it
    calls, directly or through calls of this module (`accuracy(model, loader)` every few
    epochs, a Trainer's `validate()` from `run()`). A `test()` the caller runs instead of
    `train()` (`if mode == "train": solver.train() else: solver.test()`) is another run, over
    the loader built for that mode."""
    seen: set[cst.FunctionDef] = set()
    work = [evaluating]
    while work:
        function = work.pop()
        if function is training:
            return True
        if function in seen or len(seen) > 16:
            continue
        seen.add(function)
        work.extend(caller for call in facts.calls_of(function)
                    for caller in [facts.function_of(call)] if caller is not None)
    return False


def _received_loaders(facts: Facts) -> list[ExternalLoader]:
    """What another module's function returns, by the name it is bound to here; in a helper
    module, the parameters (and `self.` attributes set from parameters) that its functions
    evaluate a model over."""
    found = [loader for loader in facts.external_loaders if not isinstance(loader.statement, cst.FunctionDef)]
    if facts.library:
        seen: set[Holder] = set()
        for name, loops in sorted(facts.loops_over.items()):
            for loop in loops:
                function = facts.function_of(loop)
                # One attribute is one value, whichever method goes over it.
                key = (None if name.startswith("self.") else function, name)
                if function is None or key in seen or _trains(facts, loop) or not (
                        _received_by(facts, function, name) and _runs_a_model_over(facts, function, loop, name)):
                    continue
                seen.add(key)
                found.append(ExternalLoader(name, function, function, loop, "its caller"))
    return sorted(found, key=lambda loader: facts.start_of(loader.call))


def _received_by(facts: Facts, function: cst.FunctionDef, name: str) -> bool:
    if name.startswith("self."):
        return name.count(".") == 1 and handed_in(facts, function, name)
    return name not in ("self", "cls") and name in parameter_names(function)


# Calls that go over the batches of what they are given, one by one.
BATCH_WRAPPERS = frozenset({"enumerate", "tqdm"})


def _runs_a_model_over(facts: Facts, function: cst.FunctionDef, loop: cst.For, name: str) -> bool:
    """`for x, y in loader:` (or through enumerate/tqdm) whose body calls a model: a
    parameter of the function (`model(x)`) or an attribute of its object (`self.model(x)`).
    A loop over `range(k)` or over a list of numbers is no evaluation."""
    iterated = loop.iter
    while isinstance(iterated, cst.Call) and iterated.args and not iterated.args[0].star and (
            dotted_name(iterated.func) or "").rsplit(".", 1)[-1] in BATCH_WRAPPERS:
        iterated = iterated.args[0].value
    if dotted_name(iterated) != name:
        return False
    parameters = parameter_names(function) - {"self", "cls", name}
    for call in calls_within(loop.body):
        called = dotted_name(call.func) or ""
        if called in parameters or called.startswith("self.") and called.count(".") == 1:
            return True
    return False


def _trains(facts: Facts, loop: cst.For) -> bool:
    return loop in facts.training_loops or loop in facts.loops_calling_training


def _received_whole(facts: Facts, holders: set[Holder], loops: list[cst.For], reached_from_here: set[cst.For],
                    figures: dict[cst.For, Figures]) -> Optional[str]:
    """Why a received loader stays whole ("" when its loops are no evaluation at all, which
    goes unreported), or None with the figures of its loops in `figures`."""
    names = {name for _, name in holders}
    for loop in loops:
        iterated = loader_name_in(facts, loop, names)
        if iterated is None:
            return ""  # not a loader's batches
        found = figures_of(facts, loop, f"{iterated}.batch_size", iterated)
        if isinstance(found, str):
            return "" if found.startswith("it is evaluated with gradients on") else found
        if found.gathers:
            figures[loop] = found
    for loop in loops:
        if loop in reached_from_here:
            return f"a loader built in this file also reaches the loop at line {facts.line_of(loop)}"
        other = _other_value_reaching_holders(facts, loop, holders)
        if other is not None:
            return other
    handed = _handed_out(facts, holders)
    if handed is not None:
        return (f"it is handed to `{dotted_name(handed.func)}` at line {facts.line_of(handed)}, whose "
                "loop ddpify cannot see (its figures would be one rank's share)")
    return None if figures else "the loops over it keep no figure ddpify can gather"


def _share(facts: Facts, edits: Edits, received: ExternalLoader, loops: list[cst.For], held: set[str]) -> None:
    """`name = evaluation_share(name)` where the name is received: after the statement that
    binds it; for a parameter or an attribute, above the first statement that reads it in
    each function that goes over it."""
    rebind = f"{received.name} = evaluation_share({received.name})\n"
    if isinstance(received.statement, cst.FunctionDef):
        functions = dict.fromkeys(function for loop in loops for function in [facts.function_of(loop)]
                                  if function is not None)
        for function in functions:
            first = next(loop for loop in loops if facts.function_of(loop) is function)
            name = loader_name_in(facts, first, held) or received.name
            edits.insert_before(_first_reading(function, name),
                                Insertion(edits.statements(f"{name} = evaluation_share({name})\n")))
    else:
        edits.insert_after(received.statement, edits.statements(rebind))
    edits.add_helper("evaluation_share", SHARE_HELPER, "dist", "torch")
    edits.add_helper("evaluation_shard", SHARD_HELPER, "dist")
    edits.report("DDP215", received.call)


def _first_reading(function: cst.FunctionDef, name: str) -> cst.BaseStatement:
    """The statement of the function's body that first reads `name` (a name or `self.x`)."""
    body = function.body.body if isinstance(function.body, cst.IndentedBlock) else ()
    for statement in body:
        # A name is read as a Name (`loader`) or an Attribute (`self.loader`).
        readers = [*find_all(statement, cst.Name), *find_all(statement, cst.Attribute)]
        if any(dotted_name(node) == name for node in readers):
            return statement
    return body[-1]


# --- which loaders -------------------------------------------------------------------------------

def _why_whole(facts: Facts, edits: Edits, loader: Loader, loops: list[cst.For]) -> Optional[str]:
    """Why this loader cannot be sharded, or None."""
    handed = _handed_out(facts, facts.loader_holders_of(loader))
    if handed is not None:
        if handed in facts.project_calls:
            return (f"it is handed to `{dotted_name(handed.func)}` at line {facts.line_of(handed)}, in "
                    "another module of the project, which takes this rank's share where it loops "
                    "over it when it can gather the figures there")
        if (dotted_name(handed.func) or "").rsplit(".", 1)[-1] == "islice":
            return (f"`{dotted_name(handed.func)}` at line {facts.line_of(handed)} takes its first batches: "
                    "whole, every rank evaluates the batches one process does (each rank's share would "
                    "give N times as many)")
        return (f"it is handed to `{dotted_name(handed.func)}` at line {facts.line_of(handed)}, whose "
                "loop ddpify cannot see (its figures would be one rank's share)")
    where = _why_whole_where_read(facts, loader, loops)
    if where is not None:
        return where
    if loader.dataset is None or not isinstance(loader.statement, cst.SimpleStatementLine):
        return "its dataset is not named in the call"
    if any(arg.star == "*" for arg in loader.call.args):
        return "its arguments are unpacked from a list"
    if isinstance(loader.call.func, cst.Name) and not facts.loader_classes.get(loader.call.func.value, True):
        return f"`{loader.call.func.value}` takes no sampler="
    if _may_shuffle_through_kwargs(facts, loader):
        sharing = [other for other in facts.loaders if other.kwargs_name == loader.kwargs_name]
        if len(sharing) > 1:
            return f"`**{loader.kwargs_name}` may hold shuffle= and is shared with another loader"
    if _batch_size(facts, edits, loader) is None:
        return "its batch size is not known"
    return None


def _picked_per_phase(facts: Facts, loader: Loader) -> Optional[str]:
    """The name a phase loop picks the loader into (`loader = val_loader` under `else:`),
    wherever the loader is handed to; None when none does."""
    picks = facts.phase_picks().values()
    if not picks:
        return None
    holders = facts.loader_holders_of(loader)
    return next((pick.alias for pick in picks for name in pick.loaders
                 if (facts.function_of(pick.phase_loop), name) in holders), None)


def _why_whole_where_read(facts: Facts, loader: Loader, loops: list[cst.For]) -> Optional[str]:
    """Why the loader stays whole for where it is read: in a comprehension, in no loop of
    this file, or in a loop over the call itself."""
    if loader.comprehension:
        return ("a comprehension reads it once where it is built (a pass over the data, as for its "
                "mean and std): every rank reads the whole set and computes the same values")
    if not loops and only_peeked(facts, loader):
        return "only one batch is drawn from it, to look at: every rank draws it as the original did"
    if not loops and (loader.returned or facts.library):
        return ("it goes to the module that evaluates it, which takes this rank's share there "
                "when it can gather the figures")
    picked_by = _picked_per_phase(facts, loader)
    if picked_by is not None:
        # A shard of its own (evaluation_shard) would be no DistributedSampler: that phase
        # loop's sums, summed only for a pass over one, would be this rank's alone.
        return (f"a phase loop picks it into `{picked_by}` beside the training loader: every rank "
                "evaluates all of it, so its figures are the original's")
    if not loops:
        return "no loop over it in this file"
    if loader.inline is not None:
        return ("it is built where it is used: name it (`val_loader = DataLoader(...)`) to have its "
                "batches shared between the ranks and its figures gathered")
    return None


# Calls that take a loader without evaluating over it.
LOADER_READERS = frozenset({f"builtins.{name}" for name in ("len", "enumerate", "iter", "next", "zip",
                                                            "print", "isinstance")}) | names.PROGRESS_BARS


def _handed_out(facts: Facts, holders: set[Holder]) -> Optional[cst.Call]:
    """A call of a function this file does not define (`utils.evaluate(model, loader)`) that
    is given the loader: the loop there is not ddpify's to gather."""
    for callee, calls in facts.calls_named.items():
        if callee in LOADER_READERS or _defined_here(facts, callee):
            continue
        for call in calls:
            if any(not arg.star and (function, facts.held_name(arg.value)) in holders
                   and facts.sees_value(call, name, function)
                   for arg in call.args for function, name in holders):
                return call
    return None


def _defined_here(facts: Facts, callee: str) -> bool:
    bare = callee[len("self."):] if callee.startswith("self.") else callee
    return any(name in facts.functions or name in facts.class_inits for name in (callee, bare))


def _may_shuffle_through_kwargs(facts: Facts, loader: Loader) -> bool:
    """`DataLoader(ds, **kwargs)` where the dict may say shuffle=True (pytorch/examples adds
    it with the CUDA options): beside a sampler it must go."""
    if loader.kwargs_name is None or "shuffle" in loader.keywords:
        return False
    return ("shuffle" in keyword_names(facts, loader)
            or known_dict_keys(facts, loader.kwargs_name) is None)


def _batch_size(facts: Facts, edits: Edits, loader: Loader) -> Optional[str]:
    argument = loader.keywords.get("batch_size")
    if argument is not None:
        return edits.code(argument.value)
    positional = [arg for arg in loader.call.args if arg.keyword is None and not arg.star]
    if len(positional) >= 2:
        return edits.code(positional[1].value)
    if loader.kwargs_name is not None:
        if "batch_size" in (known_dict_keys(facts, loader.kwargs_name) or _literal_keys(facts, loader)):
            return f'{loader.kwargs_name}["batch_size"]'
        return f'{loader.kwargs_name}.get("batch_size", 1)'
    return "1"


def _literal_keys(facts: Facts, loader: Loader) -> set[str]:
    """The keys the `**kwargs` dict is created with (updates may add more, never remove)."""
    assert loader.kwargs_name is not None
    keys: set[str] = set()
    for value in facts.assigned_values.get(loader.kwargs_name, ()):
        if isinstance(value, cst.Dict):
            keys |= {key for element in value.elements if isinstance(element, cst.DictElement)
                     for key in [string_value(element.key)] if key is not None}
    return keys


def _other_value_reaching(facts: Facts, loop: cst.For, sharded: list[Loader],
                          loader: Loader) -> Optional[str]:
    """Does anything but a sharded evaluation loader reach this loop? Its figures would be
    gathered too."""
    mine = set().union(facts.loader_holders_of(loader), *(facts.loader_holders_of(s) for s in sharded))
    return _other_value_reaching_holders(facts, loop, mine)


def _other_value_reaching_holders(facts: Facts, loop: cst.For, mine: set[Holder]) -> Optional[str]:
    """Does a value that `mine` does not hold reach the loop? The loop's iterable is followed
    back through the calls of its function."""
    function = facts.function_of(loop)
    names = [name for name, loops in facts.loops_over.items() if loop in loops]
    for name in names:
        if (function, name) in mine or (None, name) in mine and not facts.binds_locally(function, name):
            continue
        parameter = _parameter_index(function, name)
        if parameter is None:
            continue  # not a loader at all (an `enumerate` target, a tensor): not gathered
        for call in facts.calls_of(function):
            argument = argument_for(call, name, parameter)
            caller = facts.function_of(call)
            held = dotted_name(argument) if argument is not None else None
            if held is None or not ((caller, held) in mine or held.startswith("self.") and any(
                    h == held for _, h in mine) or (None, held) in mine and not facts.binds_locally(caller, held)):
                return f"`{name}` also receives another value at line {facts.line_of(call)}"
    return None


def _parameter_index(function: Optional[cst.FunctionDef], name: str) -> Optional[int]:
    if function is None:
        return None
    parameters = [p.name.value for p in function.params.params]
    if parameters[:1] == ["self"]:
        parameters = parameters[1:]
    return parameters.index(name) if name in parameters else None


# --- the edits -------------------------------------------------------------------------------------

def _shard(facts: Facts, edits: Edits, setup: Plan, loader: Loader) -> None:
    batch_size = _batch_size(facts, edits, loader)
    after: tuple[str, ...] = ()
    if _may_shuffle_through_kwargs(facts, loader):
        after = (DROP_SHUFFLE_CODE.format(kwargs=loader.kwargs_name),)
    data.attach_sampler(facts, edits, setup, loader,
                        lambda dataset: f"evaluation_shard({dataset}, {batch_size})",
                        after_sampler=after)
    edits.add_helper("evaluation_shard", SHARD_HELPER, "dist")
    edits.report("DDP215", loader.call)


def _gather(facts: Facts, edits: Edits, setup: Plan, loop: cst.For, figures: Figures,
            received: Optional[str] = None) -> None:
    """`received`: the name of a loader built in another module that the loop goes over, and
    that evaluation_share may have rebound to this rank's share."""
    iterated = received or loader_name_in(facts, loop)
    if received is not None:
        condition = RECEIVED_SHARE_CONDITION.format(loader=received)
    elif iterated is not None:
        condition = SHARE_CONDITION.format(loader=iterated)
    else:
        condition = "distributed" if setup.sees_setup(facts, loop) else "dist.is_initialized()"
    lines: list[str] = []
    if figures.batch_count_reads:
        iterable = iterated
        assert iterable is not None
        counted = facts.free_name(_batches_name(iterable))
        lines.append(f"{counted} = len({iterable})")
        for read in figures.batch_count_reads:
            edits.expressions[read] = _named(counted)
        figures.batch_counts.append(counted)
    if figures.sample_count_reads:
        assert iterated is not None
        counted = facts.free_name(_batches_name(iterated).removesuffix("batches") + "samples")
        lines.append(f"{counted} = len({iterated}.sampler)")
        for read in figures.sample_count_reads:
            edits.expressions[read] = _named(counted)
        figures.batch_counts.append(counted)
    gathered = figures.sums + figures.batch_counts + list(figures.lists) + list(figures.tables)
    shares = facts.free_name("shares")
    gather = collectives.use(edits)
    value = gathered[0] if len(gathered) == 1 else f"({', '.join(gathered)})"
    lines += [f"if {condition}:", f"    {GATHER_COMMENT}", f"    {shares} = {gather}({value})"]
    positions = list(enumerate(gathered))
    if figures.first_batch_only is not None:
        # The batch counts are every rank's (the set's), the figures rank 0's first batch alone.
        counts = [(position, name) for position, name in positions if name in figures.batch_counts]
        lines += [_gathered_line(figures, gathered, shares, position, name) for position, name in counts]
        lines += [f"    if {figures.first_batch_only}:",
                  f"        {FIRST_BATCH_COMMENT}",
                  f"        {shares} = {shares}[:1]"]
        positions = [each for each in positions if each not in counts]
        edits.report("DDP417", loop, f"{FIRST_BATCH_SUMMARY}: `{figures.first_batch_only}`")
    lines += [_gathered_line(figures, gathered, shares, position, name) for position, name in positions]
    if figures.lists:
        edits.add_helper("in_batch_order", ORDER_HELPER, "itertools")
    edits.imports.add("dist")
    edits.insert_after(loop, edits.statements("\n".join(lines) + "\n"))
    edits.report("DDP216", loop)


def _gathered_line(figures: Figures, gathered: list[str], shares: str, position: int, name: str) -> str:
    """The line that rebuilds one gathered figure from the ranks' `shares`."""
    share = shares if len(gathered) == 1 else f"[share[{position}] for share in {shares}]"
    if name in figures.tables:
        each = "share" if len(gathered) == 1 else f"share[{position}]"
        return "    " + TABLE_SUMS[figures.tables[name]].format(name=name, each=each, shares=shares)
    if name in figures.lists:
        size = figures.lists[name]
        size_argument = "" if size == "1" else f", {size}"
        return f"    {name} = in_batch_order({share}{size_argument})"
    if len(gathered) == 1:
        return f"    {name} = sum({shares})"
    return f"    {name} = sum(share[{position}] for share in {shares})"


def _named(name: str):
    def rewrite(_node: cst.Call) -> cst.Name:
        return cst.Name(name)

    return rewrite


def _batches_name(iterable: str) -> str:
    base = iterable.rsplit(".", 1)[-1]
    for suffix in ("dataloader", "loader"):
        if base.lower().endswith(suffix):
            stem = base[: -len(suffix)]
            return (stem if stem.endswith("_") or not stem else stem + "_") + "batches"
    return base + "_batches"


_EVALUATION = TRAINING + '''\
val_loader = DataLoader(dataset, batch_size=8)
total = 0.0
with torch.no_grad():
    for x, y in val_loader:
        total += torch.nn.functional.mse_loss(model(x.to(device)), y.to(device)).item()
print(total / len(val_loader))
'''

# One epoch function, called to train (with the optimizer) and to validate (without it).
_SHARED_EPOCH = TRAINING.split("for epoch")[0] + '''\
val_loader = DataLoader(dataset, batch_size=8)


def run_epoch(loader, optimizer=None):
    total = 0.0
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
        if optimizer is not None:
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        total += loss.item()
    return total / len(loader)


for epoch in range(3):
    print(run_epoch(loader, optimizer), run_epoch(val_loader))
'''

# A validation function with no no_grad of its own, run in a no_grad block by its caller.
_VALIDATE_CALLED_WITHOUT_GRADIENTS = TRAINING + '''\
val_loader = DataLoader(dataset, batch_size=8)


def validate(loader):
    total = 0.0
    for x, y in loader:
        total += torch.nn.functional.mse_loss(model(x.to(device)), y.to(device)).item()
    return total / len(loader)


with torch.no_grad():
    print(validate(val_loader))
'''

# One helper measures the training loader and the validation loader.
_TRAINING_LOADER_MEASURED = TRAINING + '''\
val_loader = DataLoader(dataset, batch_size=8)


@torch.no_grad()
def mean_loss(loader):
    total, count = 0.0, 0
    for x, y in loader:
        total += torch.nn.functional.mse_loss(model(x.to(device)), y.to(device), reduction="sum").item()
        count += len(y)
    return total / count


print(mean_loss(loader), mean_loss(val_loader))
'''

_FIRST_BATCH_FLAG = _EVALUATION.replace("total = 0.0\n", "dry_run = False\ntotal = 0.0\n").replace(
    ".item()\n", ".item()\n        if dry_run:\n            break\n", 1)

CASES = (
    # A smoke-test flag's break: every rank's first batch gathered, rank 0's kept when it holds.
    Emits(_FIRST_BATCH_FLAG, "DDP417", ("shares = shares[:1]",)),
    # A break on the loop's own count, or a count of batches drawn: whole, nothing gathered.
    Silent(_FIRST_BATCH_FLAG.replace("if dry_run:", "if total > 1.0:"), "DDP417"),
    Emits(_EVALUATION.replace("for x, y in val_loader:", "for _, (x, y) in zip(range(2), val_loader):"),
          "DDP203", ("val_loader = DataLoader(dataset, batch_size=8)",)),
    # The helper's figures are gathered: over the training loader's share too.
    Emits(_TRAINING_LOADER_MEASURED, "DDP228"),
    Silent(_TRAINING_LOADER_MEASURED, "DDP213"),
    # Only the training loader measured: nothing gathers its figures.
    Emits(_TRAINING_LOADER_MEASURED.replace(", mean_loss(val_loader))", ")"), "DDP213"),
    # Its only caller runs it without gradients: sharded; a second call with gradients on keeps it whole.
    Emits(_VALIDATE_CALLED_WITHOUT_GRADIENTS, "DDP215"),
    Silent(_VALIDATE_CALLED_WITHOUT_GRADIENTS + "print(validate(val_loader))\n", "DDP215"),
    # Handed on by name (a callback), its calls are not all in sight: whole.
    Silent(_VALIDATE_CALLED_WITHOUT_GRADIENTS + "check = validate\n", "DDP215"),
    # The validation loader stays whole; the figures are summed only over a sharded pass.
    Emits(_SHARED_EPOCH, "DDP203", ('isinstance(getattr(loader, "sampler", None), DistributedSampler)',)),
    Silent(_SHARED_EPOCH, "DDP215"),
    Emits(_EVALUATION, "DDP215", ("val_sampler = evaluation_shard(dataset, 8) if distributed else None",)),
    Emits(_EVALUATION, "DDP216", ("shares = every_rank((total, val_batches))",)),
    Silent(_EVALUATION, "DDP203"),
    Emits(_EVALUATION, "DDP203", options=Options(shard_evaluation=False)),
    Silent(_EVALUATION, "DDP215", Options(shard_evaluation=False)),
    Silent(_EVALUATION, "DDP215", Options(strategy="fsdp2")),
    # A comprehension over a loader built in place (the data's mean): whole on every rank.
    Emits(TRAINING.replace("loader = DataLoader(", "mean = torch.cat([x for x, _ in DataLoader(dataset)]).mean(dim=0)\n"
                           "loader = DataLoader("), "DDP203", ("[x for x, _ in DataLoader(dataset)]",)),
)
