"""A per-batch learning-rate schedule sized from the data set's length (DDP413).

`OneCycleLR(optimizer, max_lr, epochs=E, steps_per_epoch=len(train_ds) // batch_size)`, or
`total_steps = E * len(train_ds) // batch_size` handed to it (or to a warmup schedule's
`num_training_steps`), counts the batches one process makes of the whole data set. Sharded,
each rank's loader yields its share: the scheduler steps len(loader) times an epoch, reaches
1/N of its cycle by the last epoch, and the learning rate never anneals. The length is read
from the loader's sampler instead, as DDP224 does for an epoch cut: `len(loader.sampler)` is
this rank's share under torchrun and the whole data set as a group of one (its RandomSampler
or SequentialSampler), so plain `python` keeps the original schedule. OneCycleLR, which raises
one step past its length, sized by `len(ds) // batch_size` over a loader that keeps its last
batch, reads `len(loader)` instead: a rank's share (len(ds) / N rounded up) need not divide by
the batch size where len(ds) does. Where the loader is not built before the length is read,
the rewrite has nothing to read from and it is reported.
"""
from typing import Optional

import libcst as cst

from ddpify.analysis.control import Facts
from ddpify.analysis.facts import Loader
from ddpify.analysis.nodes import argument_for, dotted_name, find_all, is_false, string_value
from ddpify.diagnostics import Rule, Severity
from ddpify.emit.edits import Edits, replacement
from ddpify.options import Options
from ddpify.plan import Plan
from ddpify.rules.cases import TRAINING, Emits, Silent

RULES = (
    Rule("DDP413", Severity.EDIT, "a schedule's length in steps counts this rank's share of the data set",
         "A per-batch learning-rate schedule is sized from the whole data set's length over the "
         "batch size (`OneCycleLR(..., steps_per_epoch=len(train_ds) // batch_size)`). Sharded, "
         "each rank steps only len(loader) times an epoch, so the schedule would run 1/N of its "
         "cycle and the learning rate would never anneal. The length is read from the loader's "
         "sampler instead: this rank's share under torchrun, the whole data set as a group of one. "
         "OneCycleLR sized by `len(ds) // batch_size` over a loader that keeps its last batch reads "
         "`len(loader)`: a rank's share need not divide by the batch size, and one step short it raises.",
         "Nothing to do; `steps_per_epoch=len(train_loader)` says the same in one place."),
    Rule("DDP414", Severity.WARNING,
         "a schedule's length in steps counts the whole data set, read before its loader is built",
         "As DDP413, but the training loader is built after the length is read (or in another "
         "function), so there is no sampler to read its share from there.",
         "Build the loader first and size the schedule from `len(train_loader)`."),
)

# Schedules that raise when stepped once past their length (OneCycleLR: "Tried to step N
# times. The specified number of total steps is M"): a count one short on any rank ends the run.
RAISES_PAST_ITS_LENGTH = {"torch.optim.lr_scheduler.OneCycleLR"}

# Schedules sized in optimizer steps, by the keywords (and positions) that hold the length.
SCHEDULES = {
    "torch.optim.lr_scheduler.OneCycleLR": (("total_steps", 2), ("steps_per_epoch", 4)),
    "transformers.get_linear_schedule_with_warmup": (("num_training_steps", 2),),
    "transformers.get_cosine_schedule_with_warmup": (("num_training_steps", 2),),
    "transformers.optimization.get_linear_schedule_with_warmup": (("num_training_steps", 2),),
    "transformers.optimization.get_cosine_schedule_with_warmup": (("num_training_steps", 2),),
}


def plan(facts: Facts, edits: Edits, setup: Plan) -> None:
    """Rule: in a length argument of a schedule sized in steps, or in the one assignment of the
    name handed as that argument (`total_steps = epochs * len(train_ds) // bs`), `len(ds)` of
    the data set of a training loader given a DistributedSampler here (or `len(loader.dataset)`)
    reads `len(loader.sampler)`, when that loader is built before, in the same function."""
    sharded = [loader for loader in setup.loaders_given_a_sampler
               if not loader.keywords.keys() & {"sampler", "batch_sampler"} and not loader.inline]
    if edits.options.keep_global_batch:
        # Each rank's batch is the given batch size over the world size (DDP403): a rank steps as
        # many times an epoch as the original did, and the data set's count is right as it is.
        sharded = [loader for loader in sharded if not batch_size_given(loader)]
    if not sharded:
        return
    for qualified, lengths in SCHEDULES.items():
        for schedule in facts.calls_named.get(qualified, ()):
            for keyword, position in lengths:
                value = argument_for(schedule, keyword, position)
                if value is not None:
                    for length in _lengths_in(facts, value):
                        loader = _read_from_sampler(facts, edits, length, sharded)
                        if loader is not None and qualified in RAISES_PAST_ITS_LENGTH:
                            _count_the_last_batch(facts, edits, value, length, loader)


def batch_size_given(loader: Loader) -> bool:
    """The loader is given a batch size, which --keep-global-batch divides by the world size."""
    positional = [arg for arg in loader.call.args if arg.keyword is None and not arg.star]
    return "batch_size" in loader.keywords or len(positional) >= 2


def _lengths_in(facts: Facts, value: cst.BaseExpression) -> list[cst.Call]:
    """The `len(...)` calls in the value, or in the one value assigned to the name it is."""
    values = [value]
    name = dotted_name(value)
    if isinstance(value, cst.Name) and name is not None and len(facts.assigned_values.get(name, ())) == 1:
        values.append(facts.assigned_values[name][0])
    return [call for each in values for call in find_all(each, cst.Call)
            if isinstance(call.func, cst.Name) and call.func.value == "len" and len(call.args) == 1
            and not call.args[0].star]


def _read_from_sampler(facts: Facts, edits: Edits, length: cst.Call,
                       sharded: list[Loader]) -> Optional[tuple[str, Loader]]:
    """Rewrites `len(ds)` to `len(loader.sampler)`; the loader's name where it is read, and
    the loader, when it did."""
    held = _held_loader(facts, length, sharded)
    if held is not None:  # `len(loader.dataset)` of a name that holds the loader where it is read
        edits.expressions[length] = replacement(edits, f"len({held[0]}.sampler)")
        edits.standalone.add(length)
        edits.report("DDP413", length)
        return held
    loader = _loader_measured(facts, length.args[0].value, sharded)
    if loader is None:
        return None
    if loader.function is not facts.function_of(length) or facts.start_of(loader.statement) > facts.start_of(length):
        edits.report("DDP414", length, (
            f"a schedule's length in steps counts the whole data set: `{edits.code(length)}` is read before "
            f"`{loader.name}` is built, and under torchrun each rank steps only its share of the batches, so "
            f"the schedule would run 1/N of its cycle: build `{loader.name}` first and size the schedule "
            f"from `len({loader.name}.sampler)` (or `len({loader.name})`)"))
        return None
    edits.expressions[length] = replacement(edits, f"len({loader.name}.sampler)")
    edits.standalone.add(length)
    edits.report("DDP413", length)
    return loader.name, loader


def _count_the_last_batch(facts: Facts, edits: Edits, value: cst.BaseExpression, length: cst.Call,
                          read: tuple[str, Loader]) -> None:
    """Rule: `len(ds) // batch_size`, `int(len(ds) / batch_size)` (or `epochs * len(ds) //
    batch_size`) sizing a schedule
    that raises past its length, over a sharded loader that keeps its last, partial batch and
    is given that same batch size, becomes `len(loader)` (`epochs * len(loader)`). A rank's
    share is len(ds) / N rounded up, which the batch size need not divide even where it divides
    len(ds): the floor would count one step short on every rank (512 samples, batches of 32, 3
    ranks: 171 each, 5 counted, 6 made) and OneCycleLR would raise in the last epoch. As a
    group of one `len(loader)` is len(ds) / batch_size rounded up: the original's count wherever
    the original ran to the end (the batch size divides len(ds); else it raised there too).
    The batch size is followed by value, not spelling (_spellings): `bs = args.batch_size` beside
    `// args.batch_size`, `**loader_kwargs` beside `// loader_kwargs["batch_size"]`, a positional
    batch size. A divisor that is the batch size times a count of micro-batches (`// (args.
    batch_size * accum)`, an optimizer step every `accum` batches) becomes `len(loader) // accum`,
    the steps a rank makes stepping on every accum-th batch, and the original's count as a group
    of one wherever the original ran to the end."""
    name, loader = read
    drop_last = _loader_argument(facts, loader, "drop_last", 8)
    size = _loader_argument(facts, loader, "batch_size", 1)
    if drop_last is not None and not is_false(drop_last) or size is None:
        return  # whole batches only: the floor is the count on every rank
    roots = [value]
    if isinstance(value, cst.Name) and len(facts.assigned_values.get(value.value, ())) == 1:
        roots.append(facts.assigned_values[value.value][0])
    sizes = _spellings(facts, edits, size)
    for root in roots:
        for counted, rewritten in _floors_of(facts, edits, root, length, sizes, name):
            edits.expressions.pop(length, None)
            edits.expressions[counted] = replacement(edits, rewritten)
            edits.standalone.add(counted)


def _loader_argument(facts: Facts, loader: Loader, keyword: str, position: int) -> Optional[cst.BaseExpression]:
    """What the loader is given for a parameter: by keyword, by position, or as an entry of a
    dict it is handed with `**` (`DataLoader(ds, **loader_kwargs)`)."""
    given = argument_for(loader.call, keyword, position)
    if given is not None:
        return given
    for arg in loader.call.args:
        if arg.star == "**":
            entry = _dict_entry(facts, arg.value, keyword)
            if entry is not None:
                return entry
    return None


def _dict_entry(facts: Facts, holder: cst.BaseExpression, key: str) -> Optional[cst.BaseExpression]:
    """The value of `key` in the one dict a name is assigned (`{"batch_size": 64, ...}` or
    `dict(batch_size=64, ...)`)."""
    name = dotted_name(holder)
    values = facts.assigned_values.get(name, ()) if name is not None else ()
    if len(values) != 1:
        return None
    made = values[0]
    if isinstance(made, cst.Dict):
        for element in made.elements:
            if isinstance(element, cst.DictElement) and string_value(element.key) == key:
                return element.value
    if isinstance(made, cst.Call) and dotted_name(made.func) == "dict":
        return argument_for(made, key, None)
    return None


def _spellings(facts: Facts, edits: Edits, value: cst.BaseExpression, depth: int = 0) -> set[str]:
    """The codes a value is written in, following the one assignment of a name (`bs =
    args.batch_size`: `bs` and `args.batch_size`) and a constant key of a dict a name holds
    (`kwargs["batch_size"]`: the entry's value), a few steps deep."""
    codes = {edits.code(value)}
    if depth >= 3:
        return codes
    name = dotted_name(value)
    values = facts.assigned_values.get(name, ()) if name is not None else ()
    if len(values) == 1:
        codes |= _spellings(facts, edits, values[0], depth + 1)
    if isinstance(value, cst.Subscript) and len(value.slice) == 1 and isinstance(value.slice[0].slice, cst.Index):
        key = string_value(value.slice[0].slice.value)
        entry = _dict_entry(facts, value.value, key) if key is not None else None
        if entry is not None:
            codes |= _spellings(facts, edits, entry, depth + 1)
    return codes


def _micro_batches(facts: Facts, edits: Edits, divisor: cst.BaseExpression, sizes: set[str]) -> Optional[str]:
    """"" where the divisor is the loader's batch size (its value, _spellings); the code of
    `accum` where it is the batch size times it (`bs * accum`, `accum * bs`); else None."""
    if _spellings(facts, edits, divisor) & sizes:
        return ""
    if isinstance(divisor, cst.BinaryOperation) and isinstance(divisor.operator, cst.Multiply):
        for factor, other in ((divisor.left, divisor.right), (divisor.right, divisor.left)):
            if _spellings(facts, edits, factor) & sizes:
                code = edits.code(other)
                return f"({code})" if isinstance(other, cst.BinaryOperation) and not other.lpar else code
    return None


def _floors_of(facts: Facts, edits: Edits, root: cst.CSTNode, length: cst.Call, sizes: set[str],
               name: str) -> list[tuple[cst.BaseExpression, str]]:
    """The expressions in `root` that floor `length` over the batch size (`sizes`: its
    spellings), with what each becomes: `len(ds) // size` and `int(len(ds) / size)` ->
    `len(loader)`, `epochs * len(ds) // size` -> `epochs * len(loader)`, and over `size *
    accum`: `len(loader) // accum`."""
    found: list[tuple[cst.BaseExpression, str]] = []

    def batches(accum: str) -> str:
        return f"len({name}) // {accum}" if accum else f"len({name})"

    for division in find_all(root, cst.BinaryOperation):
        if not isinstance(division.operator, cst.FloorDivide):
            continue
        accum = _micro_batches(facts, edits, division.right, sizes)
        if accum is None:
            continue
        left = division.left
        if left is length:
            found.append((division, batches(accum)))
        elif isinstance(left, cst.BinaryOperation) and isinstance(left.operator, cst.Multiply) and left.right is length:
            per_epoch = f"({batches(accum)})" if accum else batches(accum)
            found.append((division, f"{edits.code(left.left)} * {per_epoch}"))
    for call in find_all(root, cst.Call):
        if isinstance(call.func, cst.Name) and call.func.value == "int" and len(call.args) == 1:
            inner = call.args[0].value
            if isinstance(inner, cst.BinaryOperation) and isinstance(inner.operator, cst.Divide) and (
                    inner.left is length):
                accum = _micro_batches(facts, edits, inner.right, sizes)
                if accum is not None:
                    found.append((call, batches(accum)))
    return found


def _held_loader(facts: Facts, length: cst.Call, sharded: list[Loader]) -> Optional[tuple[str, Loader]]:
    """`holder` for `len(holder.dataset)`, where `holder` holds a sharded training loader in the
    function of the call (the loader handed in as a parameter, `self.train_loader`)."""
    name = dotted_name(length.args[0].value)
    if name is None or not name.endswith(".dataset"):
        return None
    holder = name.removesuffix(".dataset")
    function = facts.function_of(length)
    for loader in sharded:
        holders = facts.loader_holders_of(loader)
        if (function, holder) in holders or (None, holder) in holders and not facts.binds_locally(function, holder):
            return holder, loader
    return None


def _loader_measured(facts: Facts, measured: cst.BaseExpression, sharded: list[Loader]) -> Optional[Loader]:
    """The sharded training loader whose data set `measured` is: its `.dataset`, or the name
    of the data set it was built over."""
    name = dotted_name(measured)
    if name is None:
        return None
    for loader in sharded:
        if name == f"{loader.name}.dataset" or name in _names_of_data_set(facts, loader.dataset):
            return loader
    return None


def _names_of_data_set(facts: Facts, dataset: Optional[cst.BaseExpression]) -> set[str]:
    """The names whose length is the data set's: its own name, and the tensors a
    TensorDataset is made of (`TensorDataset(X_train, y_train)`: `len(X_train)`), in place or
    through the one assignment of its name."""
    if dataset is None:
        return set()
    found = {name} if (name := dotted_name(dataset)) is not None else set()
    made = [dataset]
    if name is not None and len(facts.assigned_values.get(name, ())) == 1:
        made.append(facts.assigned_values[name][0])
    for value in made:
        if isinstance(value, cst.Call) and (dotted_name(value.func) or "").rpartition(".")[2] == "TensorDataset":
            found |= {tensor for arg in value.args if not arg.star and (tensor := dotted_name(arg.value)) is not None}
    return found


_SCHEDULER = "scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, 0.1, epochs=3, steps_per_epoch={length})\n"
_ONE_CYCLE = TRAINING.replace("for epoch in range(3):", _SCHEDULER + "for epoch in range(3):").replace(
    "        optimizer.step()\n", "        optimizer.step()\n        scheduler.step()\n")
CASES = (
    # OneCycleLR raises one step past its length: a rank's share need not divide by the batch size.
    Emits(_ONE_CYCLE.format(length="len(dataset) // 8"), "DDP413", ("steps_per_epoch=len(loader))",)),
    Emits(_ONE_CYCLE.format(length="len(loader.dataset) // 8"), "DDP413", ("steps_per_epoch=len(loader))",)),
    # Whole batches only, or a divisor that is not the loader's batch size: the share's floor.
    Emits(_ONE_CYCLE.format(length="len(dataset) // 8").replace("shuffle=True)", "shuffle=True, drop_last=True)"),
          "DDP413", ("steps_per_epoch=len(loader.sampler) // 8",)),
    Emits(_ONE_CYCLE.format(length="len(dataset) // 4"), "DDP413", ("steps_per_epoch=len(loader.sampler) // 4",)),
    Emits(_ONE_CYCLE.format(length="int(len(dataset) / 8)"), "DDP413", ("steps_per_epoch=len(loader))",)),
    Silent(_ONE_CYCLE.format(length="len(loader)"), "DDP413"),
    # --keep-global-batch divides the batch instead: as many steps an epoch on each rank as before.
    Silent(_ONE_CYCLE.format(length="len(dataset) // 8"), "DDP413", Options(keep_global_batch=True)),
    # Sized before the loader is built: nothing to read the share from there.
    Emits(_ONE_CYCLE.format(length="len(dataset) // 8").replace(_SCHEDULER.format(length="len(dataset) // 8"), "")
          .replace("loader = DataLoader(", _SCHEDULER.format(length="len(dataset) // 8") + "loader = DataLoader("),
          "DDP414"),
)
