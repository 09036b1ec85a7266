"""A training loader drawing a split by index (`sampler=SubsetRandomSampler(train_idx)`) iterates
that split as a data set of its own under torchrun, sharded by a DistributedSampler (DDP229).

`SubsetRandomSampler(idx)` over `ds` draws what `DistributedSampler(Subset(ds, idx))` draws on
one rank: the split's samples, in a new order each epoch (the sampler's epoch seeds it). Under
torchrun the loader gets that Subset and that sampler; plain `python` keeps the user's loader.
The same for a sampler chosen under a flag, SubsetRandomSampler or None (data.py's placeholder
case): the split, or the whole dataset, gets the DistributedSampler.
What changes is `loader.dataset`, which is then the split: its length is the split's, its items
are the split's by position, and it is no longer the dataset's own class. So the shape is taken
only where every read of the loader's `.dataset` in sight is an attribute of the dataset
(`.classes`, `.transform`, `.targets`), which a small Subset reads through from the dataset,
or its length shown as it is in a printed line (DDP234); a length that enters arithmetic, an
item, the object itself handed on, or the loader handed to another module of the project keep
the sampler wrapper (data.py, DistributedSamplerWrapper), which leaves `loader.dataset` as it was.

Rule (DDP234): a length that is only shown is a label of the line, not a figure. The progress
line `[{batch_idx * len(data)}/{len(loader.dataset)}]` already shows this rank's own position
under torchrun; its denominator becoming the split's sample count (which the original would
have meant) is a change a reviewer of the printed numbers accepts, and plain `python`, where
the split stays the user's sampler, prints every byte as before. A length divided into, added
to or compared (`100. * correct / len(loader.dataset)`) would change a figure: the wrapper stays.
"""
from collections.abc import Sequence
from typing import Optional, Union, cast

import libcst as cst

from ddpify.analysis.control import Facts
from ddpify.analysis.facts import Loader
from ddpify.analysis.nodes import dotted_name, find_all, first_free, names_bound_in, names_within, returns_in
from ddpify.diagnostics import Rule, Severity
from ddpify.emit.edits import Edits
from ddpify.rules.cases import TRAINING, Emits, Silent

RULES = (
    Rule("DDP229", Severity.INFO, "SubsetRandomSampler's split iterated as a Subset with a DistributedSampler",
         "`sampler=SubsetRandomSampler(idx)` draws the samples of `idx` in a new order each epoch, as a "
         "DistributedSampler over `Subset(dataset, idx)` does on one rank. Under torchrun the loader "
         "iterates that Subset, and each rank takes its share of it; plain `python` keeps the "
         "SubsetRandomSampler. There, `loader.dataset` is the split: attributes of the dataset "
         "(`.classes`, `.transform`) still read through, but `len(loader.dataset)` counts the split.",
         "Nothing to do; count the split's samples with `len(loader.sampler)` (this rank's share) "
         "where you meant them."),
    Rule("DDP235", Severity.INFO, "a DataLoader subclass's split stays a sampler: a `.dataset` read may be its",
         "A DataLoader subclass that picks its own SubsetRandomSampler iterates the split as a Subset "
         "under torchrun, with torch's DistributedSampler, where nothing in the project reads a loader's "
         "`.dataset`: its instances may be handed anywhere, and there the split would be counted or "
         "indexed in place of the dataset. Where a module reads one, each rank takes its share of what "
         "the sampler draws instead (DistributedSamplerWrapper), and `.dataset` stays the dataset.",
         "Nothing to do; where that read does not mean this loader, the split may be iterated as a "
         "Subset by hand."),
    Rule("DDP234", Severity.INFO, "this printed `len(loader.dataset)` counts the split under torchrun",
         "The loader's split is iterated as a Subset under torchrun (DDP229), so `len(loader.dataset)` "
         "is the split's sample count there, where the original counted the whole dataset. It is only "
         "shown (a progress line's total), not computed with: no figure changes, and plain `python` "
         "prints what it printed before.",
         "Nothing to do; print `len(loader.sampler)` for this rank's share, or the dataset's own length "
         "(`len(dataset)`) if you meant the whole set."),
)

# The dataset's own attributes, read through the split; `indices` and `dataset` are the
# Subset's (a dataset that is itself a Subset keeps the sampler wrapper).
SPLIT_HELPER = '''\


class DatasetSplit(Subset):
    """The samples of `dataset` at `indices`, by position, for a DistributedSampler to
    shard; every other attribute (`classes`, `transform`) is read from `dataset`."""

    def __getattr__(self, name):
        if name.startswith("__") or name == "dataset":
            raise AttributeError(name)
        return getattr(self.dataset, name)
'''

SPLIT_CODE = "{split} = {subset}({dataset}, {sampler}.indices) if distributed else {dataset}\n"
SPLIT_COMMENT = "# Under torchrun, the sampler's split as a data set of its own, which each rank takes its share of.\n"
# `sampler = SubsetRandomSampler(train_idx)` under a validation flag, else None (data.py's
# OWN_OR_NEW_SAMPLER_CODE, with the split in place of the sampler wrapper).
OWN_SPLIT_OR_NEW_SAMPLER_CODE = """\
# Under torchrun, this rank's share of the sampler's split (a data set of its own), or with no
# sampler, of the whole dataset, shuffled as the loader was asked to.
{split} = {dataset}
if distributed:
    if {sampler} is not None:
        {split} = {subset}({dataset}, {sampler}.indices)
        {sampler} = DistributedSampler({split})
    else:
        {sampler} = DistributedSampler({dataset}, shuffle={shuffle})
"""
_SUBSET_ATTRIBUTES = frozenset({"indices", "dataset"})
_SUBSET_RANDOM_SAMPLERS = frozenset(f"torch.utils.data.{module}SubsetRandomSampler" for module in ("", "sampler."))


def subset_class(facts: Facts, loader: Loader, samplers: Sequence[cst.BaseExpression]) -> Optional[str]:
    """The class the split is iterated as ("Subset", or "DatasetSplit" where the dataset's
    attributes are read through the loader), or None where `loader.dataset` must stay the
    dataset: a sampler the loader may get is not a SubsetRandomSampler of its indices alone,
    the dataset is not a name, `Subset` names something else here, or a read of
    `loader.dataset` would change."""
    if not samplers or not all(_subset_random_sampler(facts, sampler) for sampler in samplers) \
            or loader.dataset is None or dotted_name(loader.dataset) is None:
        return None
    if "DatasetSplit" in facts.bound_names or not _subset_is_torchs(facts):
        return None
    reads_attributes = False
    for function, holder in facts.loader_holders_of(loader):
        if _handed_to_another_module(facts, function, holder):
            return None
        for read in facts.attribute_reads.get(holder, ()):
            if read.attr.value != "dataset" or not _in_sight_of(facts, function, holder, read):
                continue
            if _length_only_shown(facts, read):
                continue
            if not _attribute_read_through(facts, read):
                return None
            reads_attributes = True
        if facts.attribute_writes.get(f"{holder}.dataset"):
            return None
    return "DatasetSplit" if reads_attributes else "Subset"


# A DataLoader subclass that picks its own sampler (`super().__init__(sampler=self.sampler,
# **self.init_kwargs)`, data.py's OWN_OR_NEW_SAMPLER_CODE), the split under torchrun; the
# DataLoader iterates `{split}`, which the call is then handed in place of the dataset.
SUBCLASS_SPLIT_CODE = """\
# Under torchrun, this rank's share of the sampler's split (a data set of its own), or with no
# sampler, of the whole dataset, shuffled as the loader was asked to.
{split} = {dataset}
if {condition}:
    if {sampler} is not None:
        {split} = Subset({dataset}, {sampler}.indices)
        {sampler} = DistributedSampler({split})
    else:
        {sampler} = DistributedSampler({dataset}, shuffle={shuffle})
{shuffle_off}"""


def subclass_split(facts: Facts, edits: Edits, call: cst.Call, sampler: str) -> bool:
    """Rule: a DataLoader subclass's `super().__init__(..., sampler=self.sampler)` iterates the
    sampler's split as a Subset under torchrun, with torch's DistributedSampler, where every
    value the class gives `sampler` is None or a SubsetRandomSampler of its indices alone:
    made in place, or returned at one position of a tuple by a method of the class or a
    function of the module (`self.sampler, self.valid_sampler = self._split_sampler(split)`,
    every `return` a tuple with None or such a sampler there). The instances may go anywhere
    (`config.init_obj('data_loader', module_data)`): a read of a `.dataset` anywhere in the
    project that may be theirs keeps the sampler wrapper, and is named (DDP235)."""
    function = facts.function_of(call)
    owner = facts.class_of(function)
    if function is None or owner is None or not _subset_is_torchs(facts):
        return False
    scope: cst.CSTNode = owner if sampler.startswith("self.") else function
    values = _values_given(facts, owner, scope, sampler)
    if values is None or not any(value is not None for value in values):
        return False
    if facts.loader_dataset_reads:
        where, line = facts.loader_dataset_reads[0]
        read = f"{where}:{line}" if where else f"line {line}"
        edits.report("DDP235", call, f"`{owner.name.value}` keeps each rank's share of its sampler's draws "
                     f"(DistributedSamplerWrapper), not its split as a Subset: a loader's `.dataset` may be "
                     f"read at {read}, which would then read the split")
        return False
    return True


def split_name(function: cst.FunctionDef, sampler: str) -> str:
    """`self.train_sampler` -> `train_split`, `self.sampler` -> `split`: a name the function
    neither binds nor reads."""
    stem = sampler.rsplit(".", 1)[-1].replace("sampler", "").strip("_")
    taken = names_bound_in(function) | set(names_within(function))
    return first_free(f"{stem}_split" if stem else "split", taken.__contains__)


def _values_given(facts: Facts, owner: cst.ClassDef, scope: cst.CSTNode, sampler: str
                  ) -> Optional[list[Optional[cst.Call]]]:
    """The samplers `sampler` is given in `scope` (None for a None), or None where one of its
    values is anything else."""
    values: list[Optional[cst.Call]] = []
    for assign in find_all(scope, cst.Assign):
        for target in assign.targets:
            if dotted_name(target.target) == sampler:
                given = _sampler_or_none(facts, assign.value, facts.function_of(assign))
                if given is False:
                    return None
                values.append(cast(Optional[cst.Call], given))
            elif isinstance(target.target, (cst.Tuple, cst.List)):
                positions = [index for index, element in enumerate(target.target.elements)
                             if dotted_name(element.value) == sampler]
                if not positions:
                    continue
                returned = _returned_at(facts, owner, assign.value, positions[0],
                                        len(target.target.elements))
                if returned is None or any(isinstance(element, cst.StarredElement)
                                           for element in target.target.elements):
                    return None
                values.extend(returned)
    for aug in find_all(scope, cst.AugAssign):
        if dotted_name(aug.target) == sampler:
            return None
    return values or None


def _returned_at(facts: Facts, owner: cst.ClassDef, value: cst.BaseExpression, position: int, size: int
                 ) -> Optional[list[Optional[cst.Call]]]:
    """What `self.method(...)` or `function(...)` returns at `position` of its tuple, on
    every return; None where a return is no tuple of `size` or holds anything else there."""
    if isinstance(value, cst.Tuple):  # `self.train_sampler, self.val_sampler = None, None`
        if len(value.elements) != size:
            return None
        given = _sampler_or_none(facts, value.elements[position].value, facts.function_of(value))
        return None if given is False else [cast(Optional[cst.Call], given)]
    if not isinstance(value, cst.Call):
        return None
    callee: Optional[cst.FunctionDef] = None
    if isinstance(value.func, cst.Attribute) and dotted_name(value.func.value) in ("self", owner.name.value):
        method = value.func.attr.value
        if any(name == method and cls != owner.name.value for cls, name in facts.class_methods_in_project):
            return None  # a subclass's own `_split_sampler` may hand the base another sampler
        callee = next((statement for statement in owner.body.body if isinstance(statement, cst.FunctionDef)
                       and statement.name.value == method), None)
    elif isinstance(value.func, cst.Name):
        callee = facts.functions.get(value.func.value)
    if callee is None or not returns_in(callee):
        return None
    found: list[Optional[cst.Call]] = []
    for each in returns_in(callee):
        if not isinstance(each.value, cst.Tuple) or len(each.value.elements) != size:
            return None
        given = _sampler_or_none(facts, each.value.elements[position].value, callee)
        if given is False:
            return None
        found.append(cast(Optional[cst.Call], given))
    return found


def _sampler_or_none(facts: Facts, value: cst.BaseExpression, function: Optional[cst.FunctionDef]
                     ) -> Union[cst.Call, None, bool]:
    """None for `None`; the call for `SubsetRandomSampler(idx)`, in place or held by a name
    `function` assigns once; False for anything else."""
    if isinstance(value, cst.Name) and value.value == "None":
        return None
    if isinstance(value, cst.Name) and function is not None:
        held = [assign.value for assign in find_all(function.body, cst.Assign)
                if any(dotted_name(target.target) == value.value for target in assign.targets)]
        value = held[0] if len(held) == 1 else value
    if isinstance(value, cst.Call) and _subset_random_sampler(facts, value):
        return value
    return False


def _subset_is_torchs(facts: Facts) -> bool:
    """`Subset` is free here, or torch's (not the script's own name)."""
    return "Subset" not in facts.bound_names or any(
        facts.calls_named.get(f"torch.utils.data.{module}Subset") for module in ("", "dataset."))


def _subset_random_sampler(facts: Facts, sampler: cst.BaseExpression) -> bool:
    """`SubsetRandomSampler(idx)` or `SubsetRandomSampler(indices=idx)`, its `.indices` then
    the split: a generator= of its own orders one process's draws only."""
    if not any(sampler is call for qualified in _SUBSET_RANDOM_SAMPLERS
               for call in facts.calls_named.get(qualified, ())):
        return False
    assert isinstance(sampler, cst.Call)
    args = sampler.args
    return len(args) == 1 and not args[0].star and (args[0].keyword is None or args[0].keyword.value == "indices")


def _in_sight_of(facts: Facts, function: Optional[cst.FunctionDef], holder: str, read: cst.Attribute) -> bool:
    """The read is of this holder: in its function, anywhere for `self.loader` (any method of
    the class) or a module-level name (any function that reads it as the module's)."""
    where = facts.function_of(read)
    return where is function or holder.startswith("self.") or function is None and not facts.binds_locally(
        where, holder)


def shown_lengths(facts: Facts, loader: Loader) -> list[cst.Call]:
    """The `len(loader.dataset)` calls in sight that are only shown in a printed line (DDP234)."""
    found = []
    for function, holder in facts.loader_holders_of(loader):
        for read in facts.attribute_reads.get(holder, ()):
            if read.attr.value == "dataset" and _in_sight_of(facts, function, holder, read) \
                    and _length_only_shown(facts, read):
                found.append(cast(cst.Call, facts.parents[facts.parents[read]]))
    return sorted(found, key=facts.start_of)


def report_split(facts: Facts, edits: Edits, loader: Loader) -> None:
    edits.report("DDP229", loader.call)
    for length in shown_lengths(facts, loader):
        edits.report("DDP234", length)


# Nodes a value shown as it is passes through on its way into a printed line: arguments,
# an f-string's fields, a `str.format` call's arguments, the tuple of `"..." % (...)`.
_SHOWN_AS_IS = (cst.Arg, cst.FormattedStringExpression, cst.FormattedString, cst.Tuple, cst.Element,
                cst.ConcatenatedString)


def _length_only_shown(facts: Facts, read: cst.Attribute) -> bool:
    """`len(loader.dataset)` handed as it is to a print statement: a direct argument, a
    field of an f-string or of `"...".format(...)`, an element of `"..." % (...)`; never an
    operand of arithmetic or a comparison on its way there."""
    arg = facts.parents.get(read)
    length = facts.parents.get(arg) if isinstance(arg, cst.Arg) else None
    if not (isinstance(length, cst.Call) and len(length.args) == 1
            and any(length is call for call in facts.calls_named.get("builtins.len", ()))):
        return False
    child: cst.CSTNode = length
    parent = facts.parents.get(child)
    while parent is not None and not isinstance(parent, cst.Expr):
        if isinstance(parent, cst.Call):
            if child is parent.func or not (_formats(parent) or isinstance(facts.parents.get(parent), cst.Expr)):
                return False
        elif isinstance(parent, cst.BinaryOperation):
            if not (isinstance(parent.operator, cst.Modulo) and child is parent.right
                    and isinstance(parent.left, (cst.SimpleString, cst.ConcatenatedString))):
                return False
        elif not isinstance(parent, _SHOWN_AS_IS):
            return False
        child, parent = parent, facts.parents.get(parent)
    return parent is not None and facts.statement_of(parent) in facts.output_statements


def _formats(call: cst.Call) -> bool:
    """`"...".format(...)`."""
    return isinstance(call.func, cst.Attribute) and call.func.attr.value == "format" and isinstance(
        call.func.value, (cst.SimpleString, cst.ConcatenatedString))


def _attribute_read_through(facts: Facts, read: cst.Attribute) -> bool:
    """`loader.dataset.classes`: an attribute of the dataset, read (not assigned), which the
    split reads through from the dataset; not the Subset's own `indices` or `dataset`, and
    not a dunder (`loader.dataset.__len__()` is the split's length)."""
    outer = facts.parents.get(read)
    if not isinstance(outer, cst.Attribute) or outer.value is not read:
        return False
    attribute = outer.attr.value
    return not attribute.startswith("__") and attribute not in _SUBSET_ATTRIBUTES and not isinstance(
        facts.parents.get(outer), (cst.AssignTarget, cst.AugAssign, cst.Del))


def _handed_to_another_module(facts: Facts, function: Optional[cst.FunctionDef], holder: str) -> bool:
    """The loader handed to a function or class of another module of the project, whose reads
    of its `.dataset` this file does not see."""
    for call in facts.project_calls:
        if facts.function_of(call) is not function and not holder.startswith("self."):
            continue
        if any(dotted_name(arg.value) == holder for arg in call.args):
            return True
    return False


# A DataLoader subclass that picks its own split.
_SPLIT_LOADER = TRAINING.replace("loader = DataLoader(dataset, batch_size=8, shuffle=True)\n", '''\


class SplitLoader(DataLoader):
    def __init__(self, dataset, batch_size):
        self.train_sampler = SubsetRandomSampler(range(48))
        super().__init__(dataset, batch_size=batch_size, sampler=self.train_sampler)


loader = SplitLoader(dataset, 8)
''').replace("import DataLoader,", "import DataLoader, SubsetRandomSampler,")

# Its split made by a method of the class, returning the train and validation samplers.
_METHOD_SPLIT_LOADER = TRAINING.replace("loader = DataLoader(dataset, batch_size=8, shuffle=True)\n", '''\


class SplitLoader(DataLoader):
    def __init__(self, dataset, batch_size):
        self.train_sampler, self.val_sampler = self._split()
        super().__init__(dataset, batch_size=batch_size, sampler=self.train_sampler)

    def _split(self):
        return SubsetRandomSampler(range(48)), SubsetRandomSampler(range(48, 64))


loader = SplitLoader(dataset, 8)
''').replace("import DataLoader,", "import DataLoader, SubsetRandomSampler, WeightedRandomSampler,")
# A subclass's own `_split` hands the base a sampler with no `.indices`.
_OVERRIDDEN_SPLIT = _METHOD_SPLIT_LOADER.replace("loader = SplitLoader(dataset, 8)", '''\
class WeightedLoader(SplitLoader):
    def _split(self):
        return WeightedRandomSampler([1.0] * 64, 64), None


loader = WeightedLoader(dataset, 8)''')

CASES = (
    Emits(TRAINING.replace("loader = DataLoader(dataset, batch_size=8, shuffle=True)",
                           "loader = DataLoader(dataset, batch_size=8, sampler=SubsetRandomSampler(range(48)))")
          .replace("import DataLoader,", "import DataLoader, SubsetRandomSampler,"),
          "DDP229", ("split = Subset(dataset, sampler.indices) if distributed else dataset",)),
    # `len(loader.dataset)` divided into a figure counts the whole dataset: the loader keeps
    # it, and the sampler wrapper.
    Silent(TRAINING.replace("loader = DataLoader(dataset, batch_size=8, shuffle=True)",
                            "loader = DataLoader(dataset, batch_size=8, sampler=SubsetRandomSampler(range(48)))")
           .replace("import DataLoader,", "import DataLoader, SubsetRandomSampler,")
           .replace("print(epoch, loss.item())", "print(epoch, loss.item() / len(loader.dataset))"), "DDP229"),
    # Only shown, as a progress line's total: the split's count under torchrun.
    Emits(TRAINING.replace("loader = DataLoader(dataset, batch_size=8, shuffle=True)",
                           "loader = DataLoader(dataset, batch_size=8, sampler=SubsetRandomSampler(range(48)))")
          .replace("import DataLoader,", "import DataLoader, SubsetRandomSampler,")
          .replace("print(epoch, loss.item())", "print(epoch, loss.item(), len(loader.dataset))"),
          "DDP234", ("split = Subset(dataset, sampler.indices) if distributed else dataset",)),
    Emits(_SPLIT_LOADER, "DDP229", ("train_split = Subset(dataset, self.train_sampler.indices)",
                                    "super().__init__(train_split, batch_size=batch_size")),
    # Its instance's `.dataset` read: the sampler wrapper, and the read named.
    Emits(_SPLIT_LOADER.replace("print(epoch, loss.item())", "print(epoch, loss.item() * len(loader.dataset))"),
          "DDP235", ("DistributedSamplerWrapper(self.train_sampler)",)),
    Emits(_METHOD_SPLIT_LOADER, "DDP229", ("train_split = Subset(dataset, self.train_sampler.indices)",)),
    Silent(_OVERRIDDEN_SPLIT, "DDP229"),
)
