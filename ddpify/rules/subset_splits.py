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
(`.classes`, `.transform`, `.targets`), which a small Subset reads through from the dataset;
a length, an item, the object itself handed on, or the loader handed to another module of the
project keep the sampler wrapper (data.py, DistributedSamplerWrapper), which leaves
`loader.dataset` as it was.
"""
from collections.abc import Sequence
from typing import Optional

import libcst as cst

from ddpify.analysis.control import Facts
from ddpify.analysis.facts import Loader
from ddpify.analysis.nodes import dotted_name
from ddpify.diagnostics import Rule, Severity
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
    if "DatasetSplit" in facts.bound_names or "Subset" in facts.bound_names and not any(
            facts.calls_named.get(f"torch.utils.data.{module}Subset") for module in ("", "dataset.")):
        return None  # (`Subset` is the script's own name, or not known to be torch's)
    reads_attributes = False
    for function, holder in facts.loader_holders_of(loader):
        if _handed_to_another_module(facts, function, holder):
            return None
        for read in facts.attribute_reads.get(holder, ()):
            if read.attr.value != "dataset" or not _in_sight_of(facts, function, holder, read):
                continue
            if not _attribute_read_through(facts, read):
                return None
            reads_attributes = True
        if facts.attribute_writes.get(f"{holder}.dataset"):
            return None
    return "DatasetSplit" if reads_attributes else "Subset"


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


CASES = (
    Emits(TRAINING.replace("loader = DataLoader(dataset, batch_size=8, shuffle=True)",
                           "loader = DataLoader(dataset, batch_size=8, sampler=SubsetRandomSampler(range(48)))")
          .replace("import DataLoader,", "import DataLoader, SubsetRandomSampler,"),
          "DDP229", ("split = Subset(dataset, sampler.indices) if distributed else dataset",)),
    # `len(loader.dataset)` counts the whole dataset: the loader keeps it, and the sampler wrapper.
    Silent(TRAINING.replace("loader = DataLoader(dataset, batch_size=8, shuffle=True)",
                            "loader = DataLoader(dataset, batch_size=8, sampler=SubsetRandomSampler(range(48)))")
           .replace("import DataLoader,", "import DataLoader, SubsetRandomSampler,")
           .replace("print(epoch, loss.item())", "print(epoch, loss.item(), len(loader.dataset))"), "DDP229"),
)
