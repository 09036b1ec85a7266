"""DistributedSampler for training loaders and set_epoch in their epoch loop (DDP201-DDP212).

As a group of one the sampler is None and the loader shuffles exactly as before, so plain
`python` reproduces the original's numbers; under torchrun the sampler shards and shuffles.
A loader is a training loader when a loop over it trains (backward or optimizer step);
evaluation loaders stay whole so that the figures rank 0 prints are the original's.
"""
from collections.abc import Collection, Sequence
from typing import Callable, Optional, cast

import libcst as cst

from ddpify.analysis import names, seeding
from ddpify.analysis.control import Facts, is_training_loader
from ddpify.analysis.facts import Loader, Statement
from ddpify.analysis.nodes import (
    argument_among,
    argument_for,
    calls_within,
    dotted_name,
    find_all,
    first_free,
    parameter_names,
    positional_parameters,
    returns_in,
    string_value,
    yields_each_batch,
)
from ddpify.analysis.values import keyword_names, known_dict_keys, literal_dict_keys
from ddpify.diagnostics import Rule, Severity
from ddpify.emit.arguments import (
    edit_loader_arguments,
    fit_conditional,
    loader_call_in_place,
    loader_statement,
    shuffle_beside,
)
from ddpify.emit.edits import Edits, Insertion, replacement
from ddpify.options import Options
from ddpify.plan import Plan
from ddpify.rules import downloads, epoch_cut, full_batches, hand_batches, schedule_length, splits, subset_splits
from ddpify.rules.cases import TRAINING, Emits, Silent
from ddpify.rules.epochs import (
    SET_EPOCH_IF_DISTRIBUTED_CODE,
    SHARDED_THERE,
    enclosing_whiles,
    handed_to_project_training,
    plan_external,
    plan_external_in_place,
    set_epoch,
    set_epoch_at_restarts_of_listed_loaders,
    while_trains,
)
from ddpify.rules.setup import group_joined_before

RULES = (
    Rule("DDP201", Severity.EDIT, "DistributedSampler carries the loader's shuffle",
         "Without a DistributedSampler every rank trains on the whole dataset, so an epoch "
         "does N times the work and the ranks see the same batches.",
         "Nothing to do."),
    Rule("DDP204", Severity.WARNING, "batch_sampler= cannot be sharded automatically",
         "A custom batch sampler decides which samples each batch holds; ddpify cannot "
         "split it between ranks without changing its meaning.",
         "Make the batch sampler rank-aware (take rank and world size) or use sampler=."),
    Rule("DDP221", Severity.INFO, "batch sampler shards by rank itself: kept, told the epoch",
         "The loader's batch sampler is a class of the project that asks torch.distributed "
         "for the rank and the world size and has set_epoch: it already gives each rank its "
         "own batches. It is kept as it is, and its set_epoch is called at the top of the "
         "epoch loop, as a DistributedSampler's would be.",
         "Nothing to do; check that its ranks draw the same number of batches."),
    Rule("DDP205", Severity.WARNING, "IterableDataset is not sharded by DistributedSampler",
         "Samplers do not apply to iterable datasets; every rank would stream the same data.",
         "Shard inside __iter__ with torch.distributed.get_rank() and get_world_size()."),
    Rule("DDP206", Severity.INFO, "global batch size grows with the world size",
         "Each rank draws batch_size samples, so one step consumes batch_size x world_size "
         "samples; the learning rate may need scaling.",
         "Scale the learning rate, or run ddpify with --keep-global-batch."),
    Rule("DDP207", Severity.WARNING, "existing sampler= left as is",
         "A custom sampler decides the order on every rank; ddpify cannot shard it safely.",
         "Wrap the sampler's indices with DistributedSampler or make it rank-aware."),
    Rule("DDP210", Severity.WARNING, "training loader not sharded: add a DistributedSampler by hand",
         "ddpify could not rewrite this loader safely (its dataset, sampler or arguments are "
         "built where the distributed setup is not in scope, or in a form it cannot read), so "
         "every rank would train on the whole dataset.",
         "Pass `sampler=DistributedSampler(dataset)` when distributed (and drop shuffle=), "
         "and call sampler.set_epoch(epoch) at the top of each epoch."),
    Rule("DDP213", Severity.WARNING, "a loader built for training is also used for evaluation",
         "The same loader (or the function that builds it) feeds training and a pass that does "
         "not train: an evaluation loop, or a statistics pass (a scaler fitted over it, class "
         "counts). Its DistributedSampler shards both, so each rank evaluates 1/N of the data "
         "and the figures rank 0 prints are its shard's only, and statistics computed from "
         "one rank's share differ per rank.",
         "Build the evaluation (or statistics) loader without the sampler, or all-reduce the "
         "sums and counts before they are used."),
    Rule("DDP403", Severity.EDIT, "per-process batch size divided by the world size",
         "With --keep-global-batch each rank draws batch_size // world_size samples, so one "
         "step still consumes the original batch (rounded down to a multiple of the world "
         "size) and the learning rate needs no change.",
         "Nothing to do; make batch_size a multiple of the world size to keep it exact."),
)

SAMPLER_VALUE_CODE = "{sampler} = {value} if {condition} else None\n"
# Where the setup's `distributed` is out of scope (a loader built in a helper function).
OUT_OF_SETUP_CONDITION = "dist.is_initialized()"
DATASET_CODE = "{dataset} = {expression}\n"
IN_PLACE_WITH_OWN_SAMPLER = ("training loader built where it is used, with a sampler of its own: name it first "
                             "(`train_loader = DataLoader(...)`) so that its sampler can be sharded and its "
                             "epoch set")


def plan(facts: Facts, edits: Edits, setup: Plan) -> None:
    sharding_classes = _shard_subclass_samplers(facts, edits, setup)
    for loader in facts.loaders:
        if any(loader is taken for taken in setup.loaders_in_dicts):  # loader_dicts.py's
            continue
        shards_itself = isinstance(loader.call.func, cst.Name) and loader.call.func.value in sharding_classes
        keywords = keyword_names(facts, loader)
        if loader.inline is not None and (shards_itself or "sampler" in keywords) and is_training_loader(facts, loader):
            # Its sampler's epoch would be set through a name it does not have.
            edits.report("DDP210", loader.call, IN_PLACE_WITH_OWN_SAMPLER)
        elif shards_itself and not keywords & {"sampler", "batch_sampler"}:
            setup.built_sharding_themselves.append(loader.call)
            _plan_self_sharding_loader(facts, edits, loader)
        else:
            _plan_loader(facts, edits, setup, loader)
    plan_external(facts, edits, setup)
    plan_external_in_place(facts, edits, setup)
    hand_batches.plan(facts, edits, setup)
    hand_batches.report_batch_loops(facts, edits, setup)
    downloads.plan(facts, edits, setup)
    splits.plan(facts, edits, setup)
    epoch_cut.plan(facts, edits, setup)
    schedule_length.plan(facts, edits, setup)


# A loader class that shards itself gives its instances a DistributedSampler only under
# torchrun; as a group of one they keep the sampler the class chose.
SET_EPOCH_IF_SHARDED_CODE = (
    "if isinstance({sampler}, DistributedSampler):\n    {sampler}.set_epoch({epoch})\n"
)


def _plan_self_sharding_loader(facts: Facts, edits: Edits, loader: Loader) -> None:
    """An instance of a loader class that shards itself under torchrun (a template's
    BaseDataLoader): a training loader needs only set_epoch in its epoch loop. An evaluation
    loader of that class would evaluate this rank's share, and its figures would be rank
    0's alone: a person must give it a class that does not shard (DDP207)."""
    if not is_training_loader(facts, loader):
        edits.report("DDP207", loader.call, f"`{edits.code(loader.call.func)}` shards itself under "
                     "torchrun, so this evaluation loader would evaluate one rank's share: build it "
                     "with a plain DataLoader, or gather its figures")
        return
    edits.imports.add("DistributedSampler")
    set_epoch(facts, edits, loader, f"{loader.name}.sampler", SET_EPOCH_IF_SHARDED_CODE)


def _sum_shared_loops_only_when_sharded(facts: Facts, setup: Plan, loader: Loader) -> None:
    """An evaluation loader handed to a function that also trains when called otherwise
    (`run_epoch(model, val_loader)` beside `run_epoch(model, train_loader, optimizer)`,
    call_modes.py) stays whole; that function's loop then runs over a shard on one call and
    the whole set on the other, so its epoch figures are summed across ranks only when the
    loader it iterates has a DistributedSampler (training.py, SHARDED_THERE)."""
    holders = facts.loader_holders_of(loader)
    for loop in facts.loops_over_values(holders):
        iterated = [name for name in facts.names_iterated_by(loop)
                    if (facts.function_of(loop), name) in holders or (None, name) in holders]
        if iterated and facts.loop_trains(loop) and loop not in setup.partly_sharded_loops:
            setup.partly_sharded_loops[loop] = SHARDED_THERE.format(loader=iterated[0])


def _plan_loader(facts: Facts, edits: Edits, setup: Plan, loader: Loader) -> None:
    iterable = _iterable_dataset(facts, loader.dataset)
    keys = keyword_names(facts, loader)
    if iterable is not None:
        how = "shard it by rank inside __iter__" if iterable in facts.iterable_dataset_classes else (
            "a library's stream: shard it with the library's own by-rank split (datasets' "
            "split_dataset_by_node, webdataset's split_by_node, a datapipe's sharding_filter)")
        edits.report("DDP205", loader.call, f"IterableDataset `{iterable}` is not sharded by DistributedSampler: {how}")
    elif "batch_sampler" in keys:
        _report_batch_sampler(facts, edits, loader)
    elif "sampler" in keys and not is_training_loader(facts, loader):
        _sum_shared_loops_only_when_sharded(facts, setup, loader)
        # The sampler picks what is evaluated (a fold's held-out samples): all of it, on
        # every rank, so that the figures rank 0 prints are the original's.
        edits.report("DDP203", loader.call, "evaluation loader left unsharded: it has a sampler "
                     "of its own, and every rank evaluates all it draws")
    elif "sampler" in keys:
        shards = (_wrap_random_sampler, _shard_existing_sampler, _fill_sampler_left_none,
                  _shard_sampler_or_its_placeholder)
        if any(shard(facts, edits, setup, loader) for shard in shards):
            _check_evaluation_passes(facts, edits, setup, loader, gathered=False)
        else:
            edits.report("DDP207", loader.call)
    elif not is_training_loader(facts, loader):
        _sum_shared_loops_only_when_sharded(facts, setup, loader)
        setup.evaluation_loaders.append(loader)  # evaluation.py shards it or says why not
    elif _can_add_sampler(facts, setup, loader):
        evaluation = _evaluation_passes(facts, loader)
        role = _role_by_flag(facts, edits, loader) if evaluation else None
        add_sampler(facts, edits, loader, setup, role=role)
        if role is None:
            _check_evaluation_passes(facts, edits, setup, loader)
    else:
        edits.report("DDP210", loader.call)


def _evaluation_passes(facts: Facts, loader: Loader) -> list[cst.CSTNode]:
    return [*_evaluation_loops(facts, loader), *_other_factory_calls(facts, loader),
            *_comprehension_passes(facts, loader), *_evaluations_in_other_modules(facts, loader)]


def _evaluations_in_other_modules(facts: Facts, loader: Loader) -> list[cst.Call]:
    """Rule: a training loader handed to a function of another module of the project that
    loops over it without a training step (`calc_loss_loader(train_loader, model, device,
    num_batches=eval_iter)` imported from a helper module, or an `evaluate_model` there that
    hands it on to one) is evaluated over there, as the same loop in this file would be: the
    same answer (DDP213) whichever file the helper sits in. That module's loop cannot tell a
    training loader's share from an evaluation loader, so its figures are rank 0's share."""
    holders = facts.loader_holders_of(loader)
    return sorted((
        call for call, values in facts.loaders_evaluated_elsewhere.items()
        if any((name := facts.held_name(value)) is not None and held == name and facts.sees_value(call, name, function)
               for value in values for function, held in holders)
    ), key=facts.line_of)


def _check_evaluation_passes(facts: Facts, edits: Edits, setup: Plan, loader: Loader, gathered: bool = True) -> None:
    """Rule: whichever way a training loader is sharded (a DistributedSampler added, or in
    place of the user's own sampler: `sampler=SubsetRandomSampler(train_idx)` becomes a
    DistributedSampler over that split), every pass over it that computes figures instead of
    training (`accuracy(model, train_loader)` beside `accuracy(model, val_loader)`) now reads
    this rank's share. Its figures are the whole set's only where evaluation.py gathers them
    (DDP228); otherwise the pass is reported with its line (DDP213), never left to print rank
    0's share with exit 0. `gathered` is False for a loader drawn by a sampler of the user's
    own: as a group of one that sampler still draws a split (`len(loader.sampler)` below
    `len(loader.dataset)`), which the gather's test for a rank's share cannot tell from one,
    so such a pass is reported too (tried: plain `python` then gathered without a group)."""
    evaluation = _evaluation_passes(facts, loader)
    if not evaluation:
        return
    first = min(evaluation, key=facts.line_of)
    loops = [node for node in evaluation if isinstance(node, cst.For)]
    if gathered and len(loops) == len(evaluation) and all(_runs_a_model(facts, loop) for loop in loops):
        setup.training_loaders_evaluated.append((loader, loops))  # evaluation.py says which
    else:
        edits.report("DDP213", first, _evaluation_message(facts, edits, first))


def _evaluation_message(facts: Facts, edits: Edits, first: cst.CSTNode) -> Optional[str]:
    if isinstance(first, cst.Call) and first in facts.loaders_evaluated_elsewhere:
        return (f"{TRAINING_LOADER_EVALUATED_ELSEWHERE}: `{edits.code(first.func)}`, of another module of the "
                "project, loops over it without a training step; under torchrun it reads this rank's share, "
                "so its figures would be rank 0's share: evaluate on a loader built without the "
                "DistributedSampler")
    return None if _runs_a_model(facts, first) or _hands_a_model_on(facts, first) else STATISTICS_PASS


def _hands_a_model_on(facts: Facts, node: cst.CSTNode) -> bool:
    """The pass hands a model to a call (`losses.append(batch_loss(model, batch, device).item())`):
    it evaluates through that function, and is said as an evaluation, not as statistics."""
    held = {name for model in facts.models for _, name in facts.model_holders(model)}
    body = node.body if isinstance(node, cst.For) else None
    return body is not None and any(
        dotted_name(arg.value) in held for call in calls_within(body) for arg in call.args)


def _report_batch_sampler(facts: Facts, edits: Edits, loader: Loader) -> None:
    """A batch sampler decides which samples each batch holds, and in what order: split by
    ddpify, its batches would change. What it must do under DDP is said in full, so that the
    author can write it: take this rank's share of the batches, the same number on every
    rank, in an order all ranks draw alike each epoch. A training loader's batch sampler
    made by a class of another module of the project that does so already (it asks
    torch.distributed for the rank and has set_epoch: project.batch_sampler_by_rank) is kept,
    and its set_epoch is called at the top of the epoch loop. (One defined in the script
    itself calls torch.distributed there, which makes the whole file one ddpify leaves
    alone, DDP900.)"""
    value = argument_for(loader.call, "batch_sampler", None)
    made = [value] if isinstance(value, cst.Call) else []
    if value is not None and not made and dotted_name(value) is not None:
        made = [made for made in facts.assigned_values.get(cast(str, dotted_name(value)), ())
                if isinstance(made, cst.Call)]
    if made and all(call in facts.rank_aware_batch_samplers for call in made) and is_training_loader(facts, loader):
        # It shards itself: keep it, and tell it the epoch as a DistributedSampler is told, when
        # distributed only (as a group of one it draws its batches as in the original).
        held = dotted_name(value) if value is not None and not isinstance(value, cst.Call) else None
        set_epoch(facts, edits, loader, held or f"{loader.name}.batch_sampler",
                  "if dist.is_initialized():\n    {sampler}.set_epoch({epoch})\n",
                  "if dist.is_initialized():\n    {loader}.batch_sampler.set_epoch({epoch})\n")
        edits.imports.add("dist")
        edits.report("DDP221", loader.call)
        return
    name = edits.code(made[0].func) if made else None
    sampler = f"`{name}`" if name else "the batch sampler"
    edits.report("DDP204", loader.call, (
        f"batch_sampler= cannot be sharded automatically: make {sampler} rank-aware: give it "
        f"`num_replicas=dist.get_world_size()` and `rank=dist.get_rank()`, shuffle its batches with "
        f"a generator seeded by `seed + epoch` (the same on every rank), keep `batches[rank::num_replicas]` "
        f"padded to the same count on every rank (its __len__ too), and call its `set_epoch(epoch)` at "
        f"the top of each epoch"))


# Library calls whose datasets are iterable (a stream, no __getitem__): a DataLoader refuses a
# sampler for them ("expected unspecified sampler option"), and DistributedSampler asks their
# len. torchtext's datasets are datapipes since 0.12 (its legacy API lives under
# torchtext.legacy, and the old `Multi30k.splits(...)` is a method, three names deep).
_LIBRARY_STREAMS = ("torchtext.datasets.", "webdataset.", "torchdata.datapipes.iter.")


def _iterable_dataset(facts: Facts, dataset: Optional[cst.BaseExpression]) -> Optional[str]:
    """The IterableDataset class the loader reads, if the dataset is one defined here, or the
    library call that streams it (`Multi30k(split="train")`, `load_dataset(...,
    streaming=True)`, `wds.WebDataset(urls)`)."""
    values = [dataset] if dataset is not None else []
    name = dotted_name(dataset) if dataset is not None else None
    if name is not None:
        values = facts.assigned_values.get(name, [])
    for value in values:
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and (
                value.func.value in facts.iterable_dataset_classes):
            return value.func.value
        if isinstance(value, cst.Call) and _library_stream(facts, value):
            return dotted_name(value.func)
    return None


def _library_stream(facts: Facts, call: cst.Call) -> bool:
    qualified = next((name for name, calls in facts.calls_named.items() if any(each is call for each in calls)), "")
    if qualified.startswith(_LIBRARY_STREAMS) and qualified.count(".") == 2:
        return True
    streaming = next((arg.value for arg in call.args if arg.keyword is not None and arg.keyword.value == "streaming"),
                     None)
    return qualified == "datasets.load_dataset" and isinstance(streaming, cst.Name) and streaming.value == "True"


TRAINING_LOADER_EVALUATED_ELSEWHERE = "a loader built for training is also used for evaluation"
STATISTICS_PASS = ("a loader built for training is also read by a statistics pass: under torchrun it "
                   "sees this rank's share, so what it computes (a scaler's mean, class counts) differs "
                   "per rank: compute it over a loader built without the DistributedSampler")


def _runs_a_model(facts: Facts, node: cst.CSTNode) -> bool:
    """A pass over the training loader that calls a model (`model(x)`, a parameter or
    `self.` attribute that holds one) is an evaluation; one that only reads the batches
    (fitting a scaler, counting classes) computes statistics. A factory call elsewhere
    counts as an evaluation, as before."""
    if not isinstance(node, (cst.For, cst.CompFor)):
        return True
    held = {name for model in facts.models for _, name in facts.model_holders(model)}
    body: Optional[cst.CSTNode] = node.body if isinstance(node, cst.For) else facts.parents.get(node)
    function = facts.function_of(node)
    parameters = parameter_names(function) if function is not None else set()
    for call in calls_within(body):
        called = dotted_name(call.func) or ""
        if called in held or called.split(".")[0] in held or called in parameters \
                or called.startswith("self.") and called.count(".") == 1:
            return True
    return False


def _evaluation_loops(facts: Facts, loader: Loader) -> list[cst.For]:
    """Loops over this same loader (a factory's return value) that do not train."""
    return sorted((
        loop for loop in facts.loops_over_values(facts.loader_holders_of(loader))
        if not facts.loop_trains(loop)
        and not any(outer in facts.training_loops for outer in facts.enclosing_loops(loop))
        and not yields_each_batch(loop, facts.function_of(loop))
    ), key=facts.line_of)


def _comprehension_passes(facts: Facts, loader: Loader) -> list[cst.CompFor]:
    """Rule: a comprehension or generator over the training loader (`torch.cat([x for x, _ in
    train_loader])`, `sum(len(y) for _, y in loader)`) outside the training loops is a pass
    over it that does not train, like a for loop that does not: under its DistributedSampler
    it sees this rank's share, and what it computes (a mean and a std, class counts) differs
    per rank (DDP213). One whose items take a training step (`sum(step(b) for b in loader)`) is
    the training pass itself."""
    holders = facts.loader_holders_of(loader)
    return sorted((
        comprehension for comprehension in facts.nodes_of(cst.CompFor)
        if (name := dotted_name(comprehension.iter)) is not None
        and any(held == name and facts.sees_value(comprehension, name, function) for function, held in holders)
        and not any(outer in facts.training_loops for outer in facts.enclosing_loops(comprehension))
        and not any(comprehension in find_all(node, cst.CompFor)
                    for node in facts.training_passes_in_one_expression(name))
    ), key=facts.line_of)


def _other_factory_calls(facts: Facts, loader: Loader) -> list[cst.Call]:
    """Calls of a loader factory (`return DataLoader(...)`) whose loader does not train: not
    iterated in training here, nor handed to the project's training function or Trainer
    (`Trainer(model, data={"train": train_loader})`), which trains on it there."""
    if not loader.returned or loader.function is None:
        return []
    found: list[cst.Call] = []
    for call in facts.calls_of(loader.function):
        if facts.in_a_helpers_demo(call):
            continue  # `python loaders.py` on its own: no rank's share there
        assign = facts.parents.get(call)
        target = assign.targets[0].target if isinstance(assign, cst.Assign) and len(assign.targets) == 1 else None
        name = dotted_name(target) if target is not None else None
        trains = name is not None and any(
            facts.loop_trains(loop)
            for loop in facts.loops_over_values(facts.holders_from(facts.function_of(call), name))
        ) or (name is not None and handed_to_project_training(facts, facts.function_of(call), name)) or (
            name is not None and _drawn_by_next_in_training(facts, facts.function_of(call), name))
        if not trains and not (isinstance(target, cst.Name) and _only_a_sample_batch_read(facts, target)):
            found.append(call)
    return found


def _drawn_by_next_in_training(facts: Facts, function: Optional[cst.FunctionDef], name: str) -> bool:
    """`batches = iter(loader)` where `loader` holds the factory's loader, and a training loop
    takes its batches with `next(batches)`: a step loop trains on it, as a `for` over it would."""
    holders = facts.holders_from(function, name)
    for call in facts.calls_named.get("builtins.iter", ()):
        held = dotted_name(call.args[0].value) if call.args and not call.args[0].star else None
        if held is None or not any(held == there and facts.sees_value(call, there, holder)
                                   for holder, there in holders):
            continue
        assign = facts.parents.get(call)
        if not isinstance(assign, cst.Assign) or len(assign.targets) != 1 or not isinstance(
                assign.targets[0].target, cst.Name):
            continue
        iterator = assign.targets[0].target.value
        draws = [draw for draw in facts.calls_named.get("builtins.next", ()) if draw.args
                 and dotted_name(draw.args[0].value) == iterator
                 and facts.function_of(draw) is facts.function_of(call)]
        if any(facts.loop_trains(loop) for draw in draws for loop in facts.enclosing_loops(draw)) or any(
                while_trains(facts, loop) for draw in draws for loop in enclosing_whiles(facts, draw)):
            return True
    return False


def _only_a_sample_batch_read(facts: Facts, target: cst.Name) -> bool:
    """Rule: `test_loader = get_loader("test")`, read only by `next(iter(test_loader))` or
    `_, (points, labels) = next(enumerate(test_loader))` (a batch drawn to show predictions,
    point clouds or images): no pass over it computes a figure, so it is no evaluation of a
    training loader (DDP213). The batch shown is then one of rank 0's share: the display is
    rank 0's, like every output."""
    reads = [node for node in facts.nodes_of(cst.Name) if node.value == target.value and node is not target]
    return bool(reads) and all(_draws_one_batch(facts, read) for read in reads)


def _draws_one_batch(facts: Facts, read: cst.Name) -> bool:
    """`next(iter(read))` or `next(enumerate(read))`."""
    arg = facts.parents.get(read)
    inner = facts.parents.get(arg) if isinstance(arg, cst.Arg) else None
    outer_arg = facts.parents.get(inner) if isinstance(inner, cst.Call) else None
    outer = facts.parents.get(outer_arg) if isinstance(outer_arg, cst.Arg) else None
    return isinstance(inner, cst.Call) and dotted_name(inner.func) in ("iter", "enumerate") \
        and len(inner.args) == 1 and isinstance(outer, cst.Call) and dotted_name(outer.func) == "next" \
        and len(outer.args) == 1


def can_shard(facts: Facts, setup: Plan, loader: Loader) -> bool:
    """A training loader _plan_loader would give a DistributedSampler (DDP201)."""
    keys = keyword_names(facts, loader)
    return (_iterable_dataset(facts, loader.dataset) is None and not keys & {"sampler", "batch_sampler"}
            and _can_add_sampler(facts, setup, loader))


def _can_add_sampler(facts: Facts, setup: Plan, loader: Loader) -> bool:
    if loader.dataset is None:
        return False
    if not isinstance(loader.statement, cst.SimpleStatementLine) and loader.inline is None:
        return False
    if isinstance(loader.call.func, cst.Name) and not facts.loader_classes.get(
        loader.call.func.value, True
    ):
        return False
    if loader.kwargs_name is not None:
        if "shuffle" in loader.keywords:
            if _literal_true(loader.keywords["shuffle"].value):
                # Rule: `shuffle=True, **kwargs` (kwargs handed in by a caller, or read from a
                # config): the dict holds no shuffle (a keyword given twice is a TypeError)
                # and no sampler or batch_sampler (DataLoader refuses either beside
                # shuffle=True), or the original would fail; the sampler can be added.
                return True
            # `shuffle=False, **kwargs`: fine when the dict's keys are all known and it
            # holds neither shuffle nor a sampler.
            keys = known_dict_keys(facts, loader.kwargs_name)
            return keys is not None and not keys & {"shuffle", "sampler", "batch_sampler"}
        # The sampler pops "shuffle" from the dict: no other loader may share it.
        sharing = [other for other in facts.loaders if other.kwargs_name == loader.kwargs_name]
        return len(sharing) == 1
    return all(_spreads_no_sampling_keys(loader, arg) for arg in loader.call.args if arg.star)


def _spreads_no_sampling_keys(loader: Loader, arg: cst.Arg) -> bool:
    """Rule: a dict spread in place (`**({"num_workers": 1, "pin_memory": True} if cuda else
    {})`, a loader helper's usual spelling) is read as `**kwargs` is: beside `shuffle=True` it
    holds no shuffle and no sampler (or the original would fail); otherwise every key it can
    hold is written out and none of them is shuffle, sampler or batch_sampler. Then the
    sampler goes in beside it as in any other call."""
    if arg.star != "**":
        return False
    if "shuffle" in loader.keywords and _literal_true(loader.keywords["shuffle"].value):
        return True
    keys = literal_dict_keys(arg.value)
    return keys is not None and not keys & {"shuffle", "sampler", "batch_sampler"}


def _literal_true(value: cst.BaseExpression) -> bool:
    return isinstance(value, cst.Name) and value.value == "True"


def add_sampler(facts: Facts, edits: Edits, loader: Loader, setup: Plan, epoch: bool = True,
                role: Optional[str] = None) -> None:
    """`epoch=False`: the caller puts set_epoch where the loader's passes are (a dict of them);
    `role`: the test that says the loader is the training one (_role_by_flag)."""
    shuffle_arg = loader.keywords.get("shuffle")
    if shuffle_arg is not None:
        shuffle = edits.code(shuffle_arg.value)
    elif loader.kwargs_name is not None:
        # DataLoader refuses shuffle=True beside a sampler: the sampler takes it over.
        shuffle = f'{loader.kwargs_name}.pop("shuffle", False)'
    else:
        shuffle = "False"
    handed_out = setup.library and not facts.loops_over_values(facts.loader_holders_of(loader))
    if role is None and handed_out:
        if shuffle not in ("True", "False"):
            # A helper module builds it for its callers, shuffling as they ask: the callers
            # that shuffle train on it (sharded); the others evaluate, and keep the whole set
            # on every rank, so that their figures stay the original's.
            role, shuffle = shuffle, "True"
        else:
            role = _split_parameter(facts, loader)
    sampler = attach_sampler(
        facts, edits, setup, loader,
        lambda dataset: f"DistributedSampler({dataset}, shuffle={shuffle})",
        divide_batch=edits.options.keep_global_batch, only_when=role)
    edits.imports.add("DistributedSampler")
    setup.loaders_given_a_sampler.append(loader)
    edits.report("DDP201", loader.call)
    if not edits.options.keep_global_batch:
        edits.report("DDP206", loader.call)
    if shuffle != "False" and not handed_out and epoch:
        # (A loader handed out gets its epoch where its callers iterate it.)
        set_epoch(facts, edits, loader, sampler)
    elif shuffle != "False" and epoch:
        # (Unless its own class restarts it, `except StopIteration: iter(self.loaders[i])`.)
        set_epoch_at_restarts_of_listed_loaders(facts, edits, loader)


def _role_by_flag(facts: Facts, edits: Edits, loader: Loader) -> Optional[str]:
    """Rule: `def _get_data(self, flag)` builds the loader of every split on one DataLoader
    line, and its callers name the split with a string (`self._get_data(flag="train")`,
    `flag="val"`, `flag="test"`): the callers whose loader trains all name one split, the
    others evaluate. The sampler goes only to that split (`flag == "train"`), so that the
    evaluation loaders stay whole on every rank and what is decided from their figures
    (EarlyStopping's `break`) is decided alike on every rank; a rank that stopped alone
    would leave the others waiting in a collective. None when the callers say no such thing.
    The same for a flag that is True or False (`make_loader(is_train=True)` to train,
    `make_loader(False)` to evaluate, or the parameter's default where a call leaves it out):
    the sampler goes to the loader the training callers' value builds (`is_train`, or
    `not is_train`), whatever the factory does with the flag inside (`Digits(train=is_train)`,
    `shuffle=is_train`)."""
    function = loader.function
    calls = facts.calls_of(function) if function is not None else []
    if function is None or len(calls) < 2:
        return None
    positional = positional_parameters(function)
    if facts.class_of(function) is not None and positional:
        positional = positional[1:]  # `self._get_data("train")`: the first is the object's own
    defaults = {param.name.value: param.default for param in [*function.params.params, *function.params.kwonly_params]}
    for parameter in positional + [param.name.value for param in function.params.kwonly_params]:
        trained: set[tuple[str, str]] = set()
        evaluated: set[tuple[str, str]] = set()
        spelled: dict[tuple[str, str], str] = {}
        for call in calls:
            value = argument_among(call, parameter, positional) or defaults.get(parameter)
            text = _flag_value(value) if value is not None else None
            if text is None:
                break
            spelled[text] = edits.code(cast(cst.BaseExpression, value))
            (trained if _loader_of_call_trains(facts, call) else evaluated).add(text)
        else:
            if len(trained) == 1 and evaluated and not trained & evaluated:
                flag = next(iter(trained))
                if flag[0] == "bool":
                    return parameter if flag[1] == "True" else f"not {parameter}"
                return f"{parameter} == {spelled[flag]}"
    return None


_BOOLEANS = {"True": ("bool", "True"), "False": ("bool", "False")}


def _flag_value(value: cst.BaseExpression) -> Optional[tuple[str, str]]:
    """The literal a call hands for a flag: ("bool", "True") for True, ("str", "train") for
    "train" (kept apart, so that a string "True" is not taken for the boolean)."""
    if isinstance(value, cst.Name) and value.value in _BOOLEANS:
        return _BOOLEANS[value.value]
    text = string_value(value)
    return ("str", text) if text is not None else None


def _loader_of_call_trains(facts: Facts, call: cst.Call) -> bool:
    """A name the call's result is bound to (`train_data, train_loader = self._get_data(...)`)
    is iterated by a training loop, or handed to the project's training."""
    assign = facts.parents.get(call)
    if not (isinstance(assign, cst.Assign) and len(assign.targets) == 1 and assign.value is call):
        return False
    target = assign.targets[0].target
    bound = [element.value for element in target.elements] if isinstance(target, (cst.Tuple, cst.List)) else [target]
    function = facts.function_of(call)
    for each in bound:
        name = dotted_name(each)
        if name is not None and (any(
                facts.loop_trains(loop) for loop in facts.loops_over_values(facts.holders_from(function, name)))
                or handed_to_project_training(facts, function, name)):
            return True
    return False


def _split_parameter(facts: Facts, loader: Loader) -> Optional[str]:
    """`def get_mnist(train): dataset = datasets.MNIST(..., train=train)` then a loader over
    it, returned: the helper makes the training loader and the evaluation loader alike, as
    its callers ask. The parameter that chooses the split (torchvision's `train=`) also
    decides the sampler: the training split is sharded, the evaluation split stays whole on
    every rank, so that the figures computed over it stay the original's."""
    if loader.function is None or loader.dataset is None:
        return None
    name = dotted_name(loader.dataset)
    made = [loader.dataset] if name is None else [
        value for value in facts.assigned_values.get(name, ()) if facts.function_of(value) is loader.function]
    parameters = parameter_names(loader.function)
    flags = {dotted_name(arg.value) for value in made if isinstance(value, cst.Call)
             for arg in value.args if arg.keyword is not None and arg.keyword.value == "train"}
    if len(made) == 1 and not flags:
        return _split_by_name(loader.function, made[0])
    if len(made) != 1 or len(flags) != 1:
        return None
    flag = flags.pop()
    return flag if flag in parameters else None


# Keywords by which a dataset takes the name of its split, and the names of a training split.
SPLIT_KEYWORDS = frozenset({"mode", "split", "phase", "subset"})
TRAINING_SPLITS = frozenset({"train", "training"})


def _split_by_name(function: cst.FunctionDef, dataset: cst.BaseExpression) -> Optional[str]:
    """`def get_loader(root, mode="train"): dataset = ImageFolder(root, mode=mode)`: the split
    is named by a parameter whose default names the training split; the callers ask for
    "train" when they train and for "valid" or "test" when they evaluate. The sampler goes
    to the split the default names (`mode == "train"`), as for torchvision's `train=`."""
    if not isinstance(dataset, cst.Call):
        return None
    named = {dotted_name(arg.value) for arg in dataset.args
             if arg.keyword is not None and arg.keyword.value in SPLIT_KEYWORDS}
    if len(named) != 1:
        return None
    name = named.pop()
    for param in [*function.params.params, *function.params.kwonly_params]:
        default = param.default
        if param.name.value == name and isinstance(default, cst.SimpleString) and isinstance(
                default.evaluated_value, str) and default.evaluated_value in TRAINING_SPLITS:
            return f"{name} == {default.value}"
    return None


def attach_sampler(facts: Facts, edits: Edits, setup: Plan, loader: Loader,
                   sampler_for: Callable[[str], str], divide_batch: bool = False,
                   after_sampler: Sequence[str] = (), only_when: Optional[str] = None) -> str:
    """`{sampler} = <sampler_for(dataset)> if distributed else None` before the loader and
    `sampler=` in its call (the dataset named first when it is an expression); the
    sampler's name. `after_sampler`: lines between the two, where `{sampler}` is named."""
    condition = "distributed"
    if not setup.sees_setup(facts, loader.call):
        condition = OUT_OF_SETUP_CONDITION
        edits.imports.add("dist")
        if not setup.library and not group_joined_before(facts, setup, loader.call):
            # The condition must hold where it is placed: the group is joined above it.
            setup.early_joins.append(loader.statement)
    if only_when is not None:
        condition = f"{condition} and {parenthesized(only_when)}"
    sampler = _own_name(facts, loader, "sampler")
    inserted: list[Statement] = []
    assert loader.dataset is not None  # the callers' checks require one
    dataset = edits.code(loader.dataset)
    if dotted_name(loader.dataset) is None:
        # `DataLoader(TensorDataset(x, y), ...)`: the sampler needs the dataset too.
        dataset = _own_name(facts, loader, "dataset")
        inserted.append(edits.statement(DATASET_CODE.format(
            dataset=dataset, expression=edits.code(loader.dataset))))
    inserted.append(edits.statement(fit_conditional(SAMPLER_VALUE_CODE.format(
        sampler=sampler, value=sampler_for(dataset), condition=condition),
        facts, loader.statement, condition)))
    inserted.extend(edits.statement(line.format(sampler=sampler)) for line in after_sampler)
    edits.insert_before(loader.statement, Insertion(inserted, takes_comments=True))
    shaped = full_batches.shaped_by_batch_size(facts, loader)
    if shaped is not None:
        edits.report("DDP233", shaped)
    if "#" in edits.code(loader.call) and not divide_batch:
        # Comments between the arguments: edit the arguments themselves so they survive.
        rewrite = edit_loader_arguments(edits, loader, sampler, dataset)
        edits.expressions[loader.call] = rewrite if shaped is None else (
            lambda call: full_batches.with_drop_last(rewrite(call), sampler))
    else:
        args = _loader_args(edits, loader, sampler, dataset)
        if shaped is not None:
            starred = next((i for i, arg in enumerate(args) if arg.startswith("**")), len(args))
            args.insert(starred, full_batches.drop_last_argument(sampler))
        if divide_batch:
            args = _divide_batch_size(facts, edits, setup, loader, args)
        if loader.inline is not None:
            edits.expressions[loader.call] = replacement(edits, loader_call_in_place(facts, edits, loader, args))
        else:
            edits.replace(loader.statement, [loader_statement(facts, edits, loader, args)])
    return sampler


def parenthesized(expression: str) -> str:
    if expression.isidentifier() or expression.startswith("(") and expression.endswith(")"):
        return expression
    return f"({expression})"


def _own_name(facts: Facts, loader: Loader, kind: str) -> str:
    """The name of the sampler (or dataset) ddpify adds for a loader, taken from then on: a
    loader built in place is named after the parameter it is passed to, which may give
    another loader's sampler name. A loader of the same name in the same function (one per
    branch of a dataset choice) gets the same one, so that one set_epoch after the branches
    covers whichever branch ran."""
    key = (loader.function, loader.name, kind)
    if loader.inline is not None or loader.returned or key not in facts.derived_names:
        placeholder = _placeholder_of_a_namesake(facts, loader) if kind == "sampler" else None
        facts.derived_names[key] = placeholder or derived_name(loader, kind, facts.bound_names)
        facts.bound_names.add(facts.derived_names[key])
    return facts.derived_names[key]


def _placeholder_of_a_namesake(facts: Facts, loader: Loader) -> Optional[str]:
    """Rule: `train_loader` built in each branch of a data set choice, one branch keeping the
    ImageNet example's placeholder (`train_sampler = None`, then `sampler=train_sampler`), which
    _fill_sampler_left_none fills: the sampler added in the other branches takes the
    placeholder's name, so that the one set_epoch after the branches names a sampler bound on
    whichever branch ran (a name of its own would be unbound on the placeholder's branch, and
    the placeholder on the others). Only a plain name the function binds to None alone."""
    if loader.inline is not None or loader.returned:
        return None
    for other in facts.loaders:
        if other is loader or other.name != loader.name or other.function is not loader.function:
            continue
        arg = other.keywords.get("sampler")
        if arg is None or not isinstance(arg.value, cst.Name):
            continue
        name = arg.value.value
        values = facts.assigned_values.get(name, [])
        if values and all(isinstance(value, cst.Name) and value.value == "None"
                          and facts.function_of(value) is loader.function for value in values):
            return name
    return None


def derived_name(loader: Loader, kind: str, taken: Collection[str]) -> str:
    """`train_loader` -> `train_sampler` / `train_dataset`; `loader` -> `sampler`."""
    if loader.returned:
        base, prefix = "loader", ""
    elif loader.inline is not None:
        base, prefix = loader.inline, ""
    else:
        base = loader.name.rsplit(".", 1)[-1]
        prefix = loader.name[: len(loader.name) - len(base)]
    stem = base
    for suffix in ("dataloader", "loader"):
        if base.lower().endswith(suffix):
            stem = base[: -len(suffix)]
            break
    if stem and not stem.endswith("_"):
        stem += "_"
    return first_free(prefix + stem + kind, taken.__contains__)


def _loader_args(edits: Edits, loader: Loader, sampler: str, dataset: str) -> list[str]:
    """The loader's arguments with the dataset named, `shuffle=` kept only as a fallback
    when there is no sampler, and `sampler=` after it (or last, or before `**kwargs`)."""
    args: list[str] = []
    placed = False
    for arg in loader.call.args:
        text = edits.code_edited(arg.with_changes(comma=cst.MaybeSentinel.DEFAULT)).strip()
        if arg.value is loader.dataset:
            text = f"dataset={dataset}" if arg.keyword is not None else dataset
        if arg.star == "**" and not placed:
            args.append(f"sampler={sampler}")
            placed = True
        args.append(text)
        if arg.keyword is not None and arg.keyword.value == "shuffle":
            shuffle = shuffle_beside(edits.code(arg.value), sampler)
            if shuffle is not None:
                args[-1] = f"shuffle={shuffle}"
            args.append(f"sampler={sampler}")
            placed = True
    if not placed:
        args.append(f"sampler={sampler}")
    return args


def _divide_batch_size(facts: Facts, edits: Edits, setup: Plan, loader: Loader,
                       args: list[str]) -> list[str]:
    """--keep-global-batch: each of N processes draws batch_size // N samples, so one step
    still consumes the global batch the learning rate was tuned for."""
    if setup.sees_setup(facts, loader.call):
        world_size = "world_size"
        setup.needs_world_size = True
    else:
        world_size = "(dist.get_world_size() if dist.is_initialized() else 1)"
    positional = [arg for arg in loader.call.args if arg.keyword is None and not arg.star]
    for index, arg in enumerate(args):
        if arg.startswith("batch_size="):
            value = arg[len("batch_size="):]
            args[index] = f"batch_size={_floor_divided(value)} // {world_size}"
            edits.report("DDP403", loader.keywords["batch_size"])
            return args
    if len(positional) >= 2:
        index = args.index(edits.code(positional[1].with_changes(comma=cst.MaybeSentinel.DEFAULT)).strip())
        args[index] = f"{_floor_divided(args[index])} // {world_size}"
        edits.report("DDP403", positional[1])
    return args


def _floor_divided(value: str) -> str:
    """Parenthesise what `// world_size` would bind tighter than."""
    simple = value.replace(".", "").replace("_", "").isalnum()
    return value if simple else f"({value})"


def _wrap_random_sampler(facts: Facts, edits: Edits, setup: Plan, loader: Loader) -> bool:
    """`sampler=RandomSampler(ds)` shuffles like DistributedSampler's default: use that when
    distributed and keep the RandomSampler for plain `python`."""
    arg = loader.keywords.get("sampler")
    if arg is None:
        return False
    name = dotted_name(arg.value)
    values = facts.assigned_values.get(name, []) if name is not None else [arg.value]
    if len(values) != 1 or values[0] not in facts.random_sampler_calls:
        return False
    call = cast(cst.Call, values[0])  # one of the RandomSampler calls
    if len(call.args) != 1 or call.args[0].star or not (
        call.args[0].keyword is None or call.args[0].keyword.value == "data_source"
    ):
        # num_samples=, replacement= or generator= have no DistributedSampler twin.
        return False
    if not (setup.sees_setup(facts, call) and setup.sees_setup(facts, loader.call)):
        return False
    wrapped = f"DistributedSampler({edits.code(call.args[0].value)}) if distributed else {edits.code(call)}"
    if name is None:
        name = derived_name(loader, "sampler", facts.bound_names)
        edits.insert_before(loader.statement, Insertion(
            [edits.statement(fit_conditional(f"{name} = {wrapped}\n", facts, loader.statement))],
            takes_comments=True,
        ))
        edits.expressions[call] = lambda _node: cst.Name(name)
    else:
        edits.expressions[call] = lambda _node: edits.expression(wrapped)
    edits.imports.add("DistributedSampler")
    setup.loaders_given_a_sampler.append(loader)
    edits.report("DDP201", loader.call)
    edits.report("DDP206", loader.call)
    set_epoch(facts, edits, loader, name, SET_EPOCH_IF_DISTRIBUTED_CODE)
    return True


SAMPLER_WRAPPER_HELPER = '''\


class DistributedSamplerWrapper(DistributedSampler):
    """This rank's share of what `sampler` draws: every rank draws the same indices (the
    sampler's generator seeded by the epoch), pads them to a multiple of the world size with
    the sampler's next draws, and takes every N-th of them as they are drawn (a sampler may
    draw more than memory holds, `RandomSampler(data, replacement=True, num_samples=10**10)`)."""

    def __init__(self, sampler):
        super().__init__(range(len(sampler)), shuffle=False)
        self.sampler = sampler

    def __iter__(self):
        self.sampler.generator = torch.Generator().manual_seed(self.seed + self.epoch)
        drawn = itertools.chain.from_iterable(itertools.repeat(self.sampler, self.num_replicas))
        return itertools.islice(drawn, self.rank, self.total_size, self.num_replicas)
'''


def _shard_existing_sampler(facts: Facts, edits: Edits, setup: Plan, loader: Loader) -> bool:
    """`sampler=train_sampler`, a SubsetRandomSampler (k-fold, a validation split) or a
    WeightedRandomSampler of a training loader: under torchrun each rank takes its share of
    what the sampler draws (DistributedSamplerWrapper), with set_epoch in the epoch loop;
    plain `python` keeps the sampler as it is."""
    arg = loader.keywords.get("sampler")
    if arg is None or not is_training_loader(facts, loader) or not (
            setup.sees_setup(facts, loader.call) or setup.library or _built_only_after_the_setup(facts, setup, loader)):
        return False
    name = dotted_name(arg.value)
    values = facts.assigned_values.get(name, []) if name is not None else [arg.value]
    if len(values) != 1 or not (_sampler_with_generator(facts, values[0])
                                or _made_by_a_sampler_function(facts, values[0])):
        return False
    handed_out = not setup.sees_setup(facts, loader.call)
    if handed_out and not _indices_alike_on_every_rank(facts, loader, values[0]):
        return False
    condition = OUT_OF_SETUP_CONDITION if handed_out else "distributed"
    subset = None if handed_out else subset_splits.subset_class(facts, loader, values)
    if name is None:
        # `sampler=SubsetRandomSampler(train_ids)`: named first, so that it is written once.
        name = derived_name(loader, "sampler", facts.bound_names)
        edits.insert_before(loader.statement, Insertion(
            [edits.statement(f"{name} = {edits.code_edited(arg.value)}\n")], takes_comments=True))
    dataset = edits.code(loader.dataset) if loader.dataset is not None else ""
    if subset is not None:
        # The split under torchrun, named first: the sampler and the loader both take it.
        split = derived_name(loader, "split", facts.bound_names | {name})
        edits.insert_before(loader.statement, Insertion(edits.statements(
            subset_splits.SPLIT_COMMENT + subset_splits.SPLIT_CODE.format(
                split=split, subset=subset, dataset=dataset, sampler=name))))
        wrapped = f"DistributedSampler({split}) if distributed else {name}"
        dataset = split
        edits.imports.add("DistributedSampler")
        edits.imports.add("Subset")
        if subset != "Subset":
            edits.add_helper(subset, subset_splits.SPLIT_HELPER, "Subset")
        subset_splits.report_split(facts, edits, loader)
    else:
        wrapped = f"DistributedSamplerWrapper({name}) if {condition} else {name}"
        edits.add_helper("DistributedSamplerWrapper", SAMPLER_WRAPPER_HELPER, "DistributedSampler", "itertools")
    if handed_out:
        edits.imports.add("dist")
    if "#" in edits.code(loader.call) or not _is_assigned_or_returned(loader):
        edits.expressions[arg.value] = lambda _node: edits.expression(wrapped)
        if subset is not None and loader.dataset is not None:
            edits.expressions[loader.dataset] = lambda _node: cst.Name(dataset)
    else:  # the call rebuilt, wrapped as black would where the line grows too long
        args = [f"sampler={wrapped}" if other is arg else _argument_code(edits, other, loader.dataset, dataset)
                for other in loader.call.args]
        edits.replace(loader.statement, [loader_statement(facts, edits, loader, args)])
    setup.loaders_given_a_sampler.append(loader)
    edits.report("DDP201", loader.call)
    edits.report("DDP206", loader.call)
    if not (handed_out and not facts.loops_over_values(facts.loader_holders_of(loader))):
        # (A loader a helper module hands out gets its epoch where its callers iterate it.)
        # Out of the setup's sight (a Trainer of a helper module) `distributed` is unbound:
        # the epoch is set under the test the sampler was wrapped under.
        template = SET_EPOCH_IF_DISTRIBUTED_CODE.replace("distributed", condition, 1)
        set_epoch(facts, edits, loader, f"{loader.name}.sampler", template)
    return True


def _argument_code(edits: Edits, arg: cst.Arg, dataset: Optional[cst.BaseExpression], dataset_code: str) -> str:
    """An argument of a rebuilt loader call, as written, the dataset as `dataset_code`."""
    if arg.value is dataset:
        return f"dataset={dataset_code}" if arg.keyword is not None else dataset_code
    return edits.code(arg.with_changes(comma=cst.MaybeSentinel.DEFAULT)).strip()


def _sampler_with_generator(facts: Facts, value: cst.CSTNode) -> bool:
    """`WeightedRandomSampler(...)`, `SubsetRandomSampler(...)`, `RandomSampler(...)`."""
    return any(value is call for qualified in names.SAMPLERS_WITH_GENERATOR
               for call in facts.calls_named.get(qualified, ()))


def _made_by_a_sampler_function(facts: Facts, value: cst.CSTNode) -> bool:
    """Rule: `sampler=make_sampler(train_ds)`, a function of this file whose every return
    is such a sampler (`return WeightedRandomSampler(weights, len(weights))`, or a name it
    assigns one): the sampler it returns is sharded as one made in place. The weights come
    from the dataset alike on every rank; DistributedSamplerWrapper seeds the draw by the
    epoch, so every rank draws the same indices and takes its share."""
    if not isinstance(value, cst.Call):
        return False
    function = facts.functions.get(dotted_name(value.func) or "")
    if function is None or facts.class_of(function) is not None:
        return False
    returned = [each.value for each in returns_in(function) if each.value is not None]
    if not returned or len(returned) != len(returns_in(function)):
        return False
    for each in returned:
        held = dotted_name(each) if isinstance(each, cst.Name) else None
        made = [bound for bound in facts.assigned_values.get(held, ()) if facts.function_of(bound) is function] \
            if held is not None else [each]
        if len(made) != 1 or not _sampler_with_generator(facts, made[0]):
            return False
    return True


# Calls that fix what the random draws after them give: the same on every rank.
_DRAWS = frozenset({"shuffle", "permutation", "randperm", "choice", "sample", "random_split", "train_test_split"})


def _built_only_after_the_setup(facts: Facts, setup: Plan, loader: Loader) -> bool:
    """Rule: a loader that a function or a class of this file builds, where the setup sits in
    the script's own block (`if __name__ == "__main__":` or the top level) and every call of
    that function (every `EndlessLoader(...)` of a class's `__init__`) is in that block after
    the setup: the group exists whenever the loader is built, so `dist.is_initialized()`
    decides its sharding there, as for a helper module's loader. A call before the setup, or
    from anywhere else, leaves the sampler a person's call (DDP207)."""
    function = loader.function
    if function is None or setup.function is not None or setup.anchor is None:
        return False
    owner = facts.class_of(function)
    if owner is not None and function.name.value == "__init__":
        calls = list(facts.calls_by_callee.get(owner.name.value, ()))
    else:
        calls = facts.calls_of(function)
    after = facts.start_of(setup.anchor)
    return bool(calls) and all(
        setup.sees_setup(facts, call) and facts.start_of(call) > after for call in calls)


def _indices_alike_on_every_rank(facts: Facts, loader: Loader, sampler: cst.BaseExpression) -> bool:
    """Rule: a helper module's `train_sampler = SubsetRandomSampler(train_idx)`
    (`get_train_valid_loader`) is sharded by DistributedSamplerWrapper only when every rank
    holds the same `train_idx`: the function draws nothing at random before the sampler
    (`indices[split:]`), or seeds what it draws first (`np.random.seed(random_seed);
    np.random.shuffle(indices)`, `train_test_split(..., random_state=seed)`) with a value alike
    on every rank (not `random_seed = random.randint(1, 100)`: seeding.differs_per_process).
    A list shuffled with an unseeded generator differs per rank, and the split stays a person's
    call (DDP207)."""
    function = loader.function
    if function is None:
        return False
    before = [call for call in calls_within(function.body) if facts.start_of(call) < facts.start_of(sampler)]
    qualified = seeding.qualified_names(facts)
    seeded = False
    for call in sorted(before, key=facts.start_of):
        callee = seeding.callee_of(call, qualified)
        if seeding.seeds_a_generator(callee, call) and not seeding.differs_per_process(facts, call):
            seeded = True
        elif callee.rsplit(".", 1)[-1] in _DRAWS and not seeded and not seeding.has_its_own_seed(call):
            return False
    return True


def _fill_sampler_left_none(facts: Facts, edits: Edits, setup: Plan, loader: Loader) -> bool:
    """`train_sampler = None` then `DataLoader(dataset, shuffle=(train_sampler is None),
    sampler=train_sampler)`: the place pytorch/examples' ImageNet script keeps for a
    DistributedSampler. The placeholder gets one under torchrun, shuffling as the loader
    shuffles without it; `shuffle=(train_sampler is None)` then turns the loader's own
    shuffle off by itself, and plain `python` keeps None. Only where every value the name
    is given is None, and the loader's shuffle is that test or absent."""
    arg = loader.keywords.get("sampler")
    name = dotted_name(arg.value) if arg is not None else None
    dataset = dotted_name(loader.dataset) if loader.dataset is not None else None
    if name is None or dataset is None or not is_training_loader(facts, loader):
        return False
    condition = "distributed" if setup.sees_setup(facts, loader.call) else OUT_OF_SETUP_CONDITION
    if condition != "distributed" and not setup.library and not group_joined_before(facts, setup, loader.call):
        return False  # (the condition must hold where it is placed)
    values = facts.assigned_values.get(name, [])
    if not values or not all(isinstance(value, cst.Name) and value.value == "None" for value in values):
        return False
    shuffle = _shuffle_as_the_loader_had_it(loader, name)
    if shuffle is None:
        return False
    assignments = [facts.statement_of(value) for value in values]
    if any(not _assigns_alone(statement, value) or facts.function_of(statement) is not loader.function
           for statement, value in zip(assignments, values)):
        return False
    sampler = f"DistributedSampler({dataset}, shuffle={shuffle}) if {condition} else None"
    for value in values:
        edits.expressions[value] = lambda _node: edits.expression(sampler)
    edits.imports.add("DistributedSampler")
    if condition != "distributed":
        edits.imports.add("dist")
    setup.loaders_given_a_sampler.append(loader)
    edits.report("DDP201", loader.call)
    edits.report("DDP206", loader.call)
    if shuffle == "True":
        set_epoch(facts, edits, loader, name)
    return True


def _shuffle_as_the_loader_had_it(loader: Loader, name: str) -> Optional[str]:
    """The shuffle a DistributedSampler in place of `name` takes: "False" for a loader with
    no `shuffle=`, "True" for `shuffle=(name is None)`; None for any other shuffle."""
    shuffle_arg = loader.keywords.get("shuffle")
    if shuffle_arg is None:
        return "False"
    return "True" if _is_none_test(shuffle_arg.value, name) else None


def _shard_sampler_or_its_placeholder(facts: Facts, edits: Edits, setup: Plan, loader: Loader) -> bool:
    """`if args.val_split: sampler = SubsetRandomSampler(train_idx)` / `else: sampler = None`
    (or None first, replaced when a split is asked for), then `DataLoader(dataset,
    sampler=sampler, shuffle=(sampler is None))`: right before the loader, under torchrun,
    this rank's share of what the sampler draws, or with None, of the whole dataset shuffled
    as the loader shuffles without one; `shuffle=(sampler is None)` then turns the loader's
    own shuffle off by itself, and plain `python` keeps the sampler the script chose. Only
    where every value the name is given, alone on its line in the loader's function, is None
    or a sampler drawing from a generator (the epoch seeds it), and the loader's shuffle is
    that test or absent. Both samplers have set_epoch: it is called under torchrun only."""
    arg = loader.keywords.get("sampler")
    name = dotted_name(arg.value) if arg is not None else None
    dataset = dotted_name(loader.dataset) if loader.dataset is not None else None
    if name is None or dataset is None or not is_training_loader(facts, loader) \
            or not setup.sees_setup(facts, loader.call) or not _is_assigned_or_returned(loader):
        return False
    values = facts.assigned_values.get(name, [])
    placeholders = [value for value in values if isinstance(value, cst.Name) and value.value == "None"]
    samplers = [value for value in values if _sampler_with_generator(facts, value)]
    if not placeholders or not samplers or len(placeholders) + len(samplers) != len(values):
        return False
    if any(not _assigns_alone(facts.statement_of(value), value)
           or facts.function_of(facts.statement_of(value)) is not loader.function for value in values):
        return False
    shuffle = _shuffle_as_the_loader_had_it(loader, name)
    if shuffle is None:
        return False
    subset = subset_splits.subset_class(facts, loader, samplers)
    if subset is not None and loader.dataset is not None:
        split = derived_name(loader, "split", facts.bound_names)
        code = subset_splits.OWN_SPLIT_OR_NEW_SAMPLER_CODE.format(
            split=split, dataset=dataset, subset=subset, sampler=name, shuffle=shuffle)
        edits.expressions[loader.dataset] = lambda _node: cst.Name(split)
        edits.imports.add("Subset")
        if subset != "Subset":
            edits.add_helper(subset, subset_splits.SPLIT_HELPER, "Subset")
        subset_splits.report_split(facts, edits, loader)
    else:
        code = OWN_OR_NEW_SAMPLER_CODE.format(sampler=name, condition="distributed", dataset=dataset,
                                              shuffle=shuffle, shuffle_off="")
        edits.add_helper("DistributedSamplerWrapper", SAMPLER_WRAPPER_HELPER, "DistributedSampler", "torch",
                         "itertools")
    edits.insert_before(loader.statement, Insertion(edits.statements(code)))
    edits.imports.add("DistributedSampler")
    setup.loaders_given_a_sampler.append(loader)
    edits.report("DDP201", loader.call)
    edits.report("DDP206", loader.call)
    set_epoch(facts, edits, loader, name, SET_EPOCH_IF_DISTRIBUTED_CODE)
    return True


def _assigns_alone(statement: Statement, value: cst.BaseExpression) -> bool:
    """`name = value` alone on its line."""
    return isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 \
        and isinstance(statement.body[0], cst.Assign) and len(statement.body[0].targets) == 1 \
        and statement.body[0].value is value


def _is_none_test(node: cst.BaseExpression, name: str) -> bool:
    """`name is None`, parenthesized or not."""
    return isinstance(node, cst.Comparison) and dotted_name(node.left) == name and len(node.comparisons) == 1 \
        and isinstance(node.comparisons[0].operator, cst.Is) \
        and isinstance(node.comparisons[0].comparator, cst.Name) and node.comparisons[0].comparator.value == "None"


OWN_SAMPLER_CODE = """\
# Under torchrun, this rank's share of what the sampler draws.
if {condition} and {sampler} is not None:
    {sampler} = DistributedSamplerWrapper({sampler})
"""

# The same, and where the class has no sampler to give (no validation split), this rank's
# share of the whole dataset, shuffled as the loader was asked to.
OWN_OR_NEW_SAMPLER_CODE = """\
# Under torchrun, this rank's share of what the sampler draws, or with no sampler, of the
# whole dataset, shuffled as the loader was asked to.
if {condition}:
    if {sampler} is not None:
        {sampler} = DistributedSamplerWrapper({sampler})
    else:
        {sampler} = DistributedSampler({dataset}, shuffle={shuffle})
{shuffle_off}"""

# DataLoader(dataset, batch_size, shuffle, sampler, ...): where the positional arguments go.
_POSITIONS = {"dataset": 0, "shuffle": 2}


def _shard_subclass_samplers(facts: Facts, edits: Edits, setup: Plan) -> set[str]:
    """A DataLoader subclass that hands its own sampler to DataLoader (`super().__init__(
    sampler=self.sampler, **kwargs)`, a train/validation split with SubsetRandomSampler):
    under torchrun each rank takes its share of what that sampler draws, and where the
    sampler is None (no split) a DistributedSampler over the dataset the call passes, with
    the call's shuffle, and the call's own shuffle turned off (DataLoader refuses both).
    Where the dataset or shuffle cannot be read from the call, the None case is left to a
    person (DDP207). Returns the classes that shard themselves in both cases: their
    instances need no sampler from outside, only set_epoch."""
    sharding: set[str] = set()
    for call in facts.super_init_calls:
        owner = facts.class_of(facts.function_of(call))
        sampler = next((arg for arg in call.args if arg.keyword is not None and arg.keyword.value == "sampler"), None)
        if owner is None or owner.name.value not in facts.loader_classes or sampler is None:
            continue
        name = dotted_name(sampler.value)
        if name is None:
            continue  # `sampler=None`, or an expression: nothing of its own to shard
        condition = "distributed" if setup.sees_setup(facts, call) else OUT_OF_SETUP_CONDITION
        edits.imports.add("dist")
        arguments = _own_loader_arguments(facts, edits, call)
        split_shape = False
        if arguments is None:
            code = OWN_SAMPLER_CODE.format(sampler=name, condition=condition)
        elif split_shape := subset_splits.subclass_split(facts, edits, call, name):
            dataset, shuffle, shuffle_off = arguments
            split = subset_splits.split_name(cast(cst.FunctionDef, facts.function_of(call)), name)
            code = subset_splits.SUBCLASS_SPLIT_CODE.format(
                split=split, sampler=name, condition=condition, dataset=dataset, shuffle=shuffle,
                shuffle_off=shuffle_off(name))
            _hand_the_split(edits, call, dataset, split)
            edits.imports.add("DistributedSampler")
            edits.imports.add("Subset")
            sharding.add(owner.name.value)
            edits.report("DDP229", call)
        else:
            dataset, shuffle, shuffle_off = arguments
            code = OWN_OR_NEW_SAMPLER_CODE.format(sampler=name, condition=condition, dataset=dataset,
                                                  shuffle=shuffle, shuffle_off=shuffle_off(name))
            edits.imports.add("DistributedSampler")
            sharding.add(owner.name.value)
        edits.insert_before(facts.statement_of(call), Insertion(edits.statements(code)))
        if not split_shape:
            edits.add_helper("DistributedSamplerWrapper", SAMPLER_WRAPPER_HELPER, "DistributedSampler", "torch",
                             "itertools")
        edits.report("DDP201", call)
        if arguments is None:
            edits.report("DDP207", call, f"`{owner.name.value}` shards the sampler it is given, but when "
                         f"`{name}` is None it orders its batches itself on every rank: give that case a "
                         "DistributedSampler too")
    return sharding | _subclasses_of(facts, sharding)


def _hand_the_split(edits: Edits, call: cst.Call, dataset: str, split: str) -> None:
    """`super().__init__(dataset, ...)` or `(dataset=dataset, ...)` takes the split in place of
    the dataset; `(sampler=..., **self.init_kwargs)`, a copy of the dict with the split in it
    (the dict itself keeps the dataset, which a validation loader built from it indexes)."""
    for arg in call.args:
        if arg.star == "" and dotted_name(arg.value) == dataset:
            edits.expressions[arg.value] = lambda _node: cst.Name(split)
            return
    starred = next((arg for arg in call.args if arg.star == "**"), None)
    if starred is not None:
        copied = f"dict({edits.code(starred.value)}, dataset={split})"
        edits.expressions[starred.value] = lambda _node: edits.expression(copied)


def _own_loader_arguments(facts: Facts, edits: Edits, call: cst.Call
                          ) -> Optional[tuple[str, str, Callable[[str], str]]]:
    """The dataset and shuffle a DataLoader subclass passes to `super().__init__`, as code,
    and how its shuffle is turned off under torchrun once the sampler is given: a local
    name or an entry of the `**arguments` dict is set to False in the inserted code; any
    literal False keeps the new sampler in order. None when the dataset is not a name (it
    would be built twice), cannot be read (`*args`, a `**dict` built elsewhere), or the
    shuffle is an expression nothing can turn off."""
    keywords = {arg.keyword.value: arg for arg in call.args if arg.keyword is not None}
    positional = [arg for arg in call.args if arg.keyword is None and not arg.star]
    stars = [arg for arg in call.args if arg.star]
    if any(arg.star == "*" for arg in stars) or len(stars) > 1:
        return None
    entries: Optional[set[str]] = _dict_entries(facts, stars[0].value) if stars else set()
    if entries is None:
        return None
    dict_name = dotted_name(stars[0].value) if stars else None

    def found(key: str) -> Optional[cst.Arg]:
        if key in keywords:
            return keywords[key]
        position = _POSITIONS[key]
        return positional[position] if position < len(positional) else None

    dataset_arg, shuffle_arg = found("dataset"), found("shuffle")
    if dataset_arg is not None:
        dataset = dotted_name(dataset_arg.value)
        if dataset is None:
            return None
    elif "dataset" in entries:
        dataset = f'{dict_name}["dataset"]'
    else:
        return None
    if shuffle_arg is None and "shuffle" not in entries:
        return dataset, "False", lambda _sampler: ""
    if shuffle_arg is None:
        entry = f'{dict_name}["shuffle"]'
        return dataset, entry, lambda _sampler: f"        {entry} = False\n"
    value = shuffle_arg.value
    if isinstance(value, cst.Name) and value.value not in ("True", "False", "None"):
        return dataset, value.value, lambda _sampler: f"        {value.value} = False\n"
    if isinstance(value, cst.Name) and value.value in ("False", "None"):
        return dataset, "False", lambda _sampler: ""
    return None  # `shuffle=True` or an expression: a person says how it is turned off


def _dict_entries(facts: Facts, value: cst.BaseExpression) -> Optional[set[str]]:
    """The keys of a `**name` dict assigned once, from a literal or `dict(key=...)`."""
    name = dotted_name(value)
    if name is None or len(facts.assigned_values.get(name, [])) != 1:
        return None
    return known_dict_keys(facts, name)


def _subclasses_of(facts: Facts, classes: set[str]) -> set[str]:
    """Loader classes built on one of `classes` whose own `super().__init__` passes no
    sampler: they shard as their base does."""
    found: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, node in facts.classes.items():
            if name in classes | found or name not in facts.loader_classes:
                continue
            bases = {base.value.value for base in node.bases if isinstance(base.value, cst.Name)}
            passes_sampler = any(
                arg.keyword is not None and arg.keyword.value == "sampler"
                for call in facts.super_init_calls if facts.class_of(facts.function_of(call)) is node
                for arg in call.args)
            if bases & (classes | found) and not passes_sampler:
                found.add(name)
                changed = True
    return found


def _is_assigned_or_returned(loader: Loader) -> bool:
    """`name = DataLoader(...)` or `return DataLoader(...)` alone on its line, the shapes
    loader_statement rebuilds."""
    statement = loader.statement
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return False
    small = statement.body[0]
    if isinstance(small, cst.Return):
        return loader.returned and small.value is loader.call
    return isinstance(small, cst.Assign) and len(small.targets) == 1 and small.value is loader.call


CASES = (
    # `train_sampler = None`, the place pytorch/examples' ImageNet script keeps for one.
    Emits(TRAINING.replace("loader = DataLoader(dataset, batch_size=8, shuffle=True)",
                           "train_sampler = None\n"
                           "loader = DataLoader(dataset, batch_size=8, shuffle=(train_sampler is None), "
                           "sampler=train_sampler)"),
          "DDP201", ("train_sampler = DistributedSampler(dataset, shuffle=True) if distributed else None",)),
    # A sampler given a value besides None is the user's own: left as it is.
    Emits(TRAINING.replace("loader = DataLoader(dataset, batch_size=8, shuffle=True)",
                           "train_sampler = None\n"
                           "if len(dataset) > 10:\n"
                           "    train_sampler = MySampler(dataset)\n"
                           "loader = DataLoader(dataset, batch_size=8, shuffle=(train_sampler is None), "
                           "sampler=train_sampler)"), "DDP207"),
    Emits(TRAINING, "DDP201", ("sampler = DistributedSampler(dataset, shuffle=True) if distributed else None",
                               "shuffle=sampler is None, sampler=sampler")),
    Emits(TRAINING, "DDP206"),
    Silent(TRAINING, "DDP206", Options(keep_global_batch=True)),
    Emits(TRAINING, "DDP403", ("batch_size=8 // world_size",), Options(keep_global_batch=True)),
    Emits(TRAINING.replace("batch_size=8, shuffle=True)", "batch_sampler=BucketSampler(dataset))")
          .replace("from torch.utils", "from buckets import BucketSampler\nfrom torch.utils"), "DDP204"),
    Emits(TRAINING.replace("dataset = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))\n", '''\


class Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        for _ in range(64):
            yield torch.randn(4), torch.randn(1)


dataset = Stream()
''').replace(", shuffle=True)", ")"), "DDP205"),
    Emits(TRAINING.replace("shuffle=True)", "sampler=BalancedSampler(dataset))")
          .replace("from torch.utils", "from sampling import BalancedSampler\nfrom torch.utils"), "DDP207"),
    Silent(TRAINING.replace("shuffle=True)", "sampler=torch.utils.data.RandomSampler(dataset))"), "DDP207"),
    Emits(TRAINING.replace("loader = DataLoader(dataset, batch_size=8, shuffle=True)\n", '''\


class FixedLoader(DataLoader):
    def __init__(self, dataset):
        super().__init__(dataset, batch_size=8, shuffle=True)


loader = FixedLoader(dataset)
'''), "DDP210"),
    # Built where it is used, with a sampler of its own: named first by a person.
    Emits(TRAINING.replace("loader = DataLoader(dataset, batch_size=8, shuffle=True)\n", "")
          .replace("for x, y in loader:",
                   "for x, y in DataLoader(dataset, batch_size=8, sampler=RandomSampler(dataset)):")
          .replace("from torch.utils.data import", "from torch.utils.data import RandomSampler,"), "DDP210"),
    Emits(TRAINING + '''\
with torch.no_grad():
    for x, y in loader:
        print(torch.nn.functional.mse_loss(model(x.to(device)), y.to(device)).item())
''', "DDP213"),
)
