"""A training pass that shapes tensors by the loader's batch size drops the sharded loader's
last, partial batch (DDP233).

`images.reshape(batch_size, -1)` and `torch.ones(batch_size, 1)` in the training loop assume
every batch is full. The original runs because its data set divides by the batch size (60,000
MNIST images in batches of 100); sharded, a rank's share is len(dataset) / N rounded up, which
the batch size need not divide (3,750 on 16 ranks), so the last batch of every epoch is
smaller and the step fails ("shape '[100, -1]' is invalid") on some world sizes only. The
sharded loader drops its last batch (`drop_last=sampler is not None`): as a group of one the
loader is the original's, and under torchrun each rank leaves out fewer samples than one batch
per epoch, as the DistributedSampler's padding already repeats some.
"""
from typing import Optional

import libcst as cst

from ddpify.analysis.control import Facts
from ddpify.analysis.facts import Loader
from ddpify.analysis.nodes import dotted_name, find_all
from ddpify.diagnostics import Rule, Severity
from ddpify.rules.cases import TRAINING, Emits, Silent

RULES = (
    Rule("DDP233", Severity.EDIT, "batches shaped by the batch size: the sharded loader drops its last, partial batch",
         "The training loop sizes tensors by the batch size (`x.view(batch_size, -1)`, "
         "`torch.ones(batch_size, 1)`), which holds for the original because its data set divides "
         "by the batch size; a rank's share need not, so its last batch would be smaller and the "
         "step would fail on some world sizes. `drop_last=sampler is not None` keeps every batch "
         "full when sharded.",
         "Nothing to do; or size the tensors by the batch itself (`x.size(0)`)."),
)

# Calls that take a shape: a tensor's view of it, and torch's factories.
_SHAPING_METHODS = frozenset({"view", "reshape", "expand", "repeat"})
_FACTORIES = frozenset({"ones", "zeros", "full", "empty", "rand", "randn", "randint"})
_TARGET_FACTORIES = frozenset({"ones", "zeros", "full", "empty"})


def shaped_by_batch_size(facts: Facts, loader: Loader) -> Optional[cst.CSTNode]:
    """Rule: where a training pass over the loader reads the loader's batch size (a name or
    an attribute: `batch_size`, `args.batch_size`) as a dimension of a tensor, and nothing in
    the pass rebinds it from the batch (`batch_size = images.size(0)`), that read; None where
    the loader already drops its last batch."""
    size = _batch_size_expression(loader)
    if size is None or loader.keywords.get("drop_last") is not None:
        return None  # (a drop_last the script set, either way, is its own choice)
    for loop in facts.loops_over_values(facts.loader_holders_of(loader)):
        if not facts.loop_trains(loop) or _rebound_in(loop, size):
            continue
        shaped = _shape_read(find_all(loop.body, cst.Call), size) or _shape_read(
            _calls_made_for_the_loop(facts, loop), size)
        if shaped is not None:
            return shaped
    return None


def _shape_read(calls: list[cst.Call], size: str) -> Optional[cst.CSTNode]:
    for call in calls:
        if _takes_a_shape(call):
            for arg in call.args:
                if dotted_name(arg.value) == size:
                    return arg.value
    return None


def _calls_made_for_the_loop(facts: Facts, loop: cst.For) -> list[cst.Call]:
    """The calls of assignments above the loop, in its function (or at the top level), of
    names the loop reads: labels made once for every batch (`real_labels = torch.ones(batch_size,
    1)` before `for images, _ in loader:`)."""
    read = {dotted_name(node) for node in find_all(loop.body, cst.Name)}
    scope = facts.function_of(loop)
    calls: list[cst.Call] = []
    for assign in find_all(scope.body if scope is not None else facts.module, cst.Assign):
        if facts.function_of(assign) is not scope or facts.line_of(assign) >= facts.line_of(loop):
            continue
        if any(dotted_name(target.target) in read for target in assign.targets):
            calls.extend(call for call in find_all(assign.value, cst.Call) if _makes_targets(call))
    return calls


def _makes_targets(call: cst.Call) -> bool:
    """`torch.ones(batch_size, 1)`, `torch.full((batch_size,), 1.0)`: constant targets, which meet
    every batch in the loss. Not noise drawn once (`fixed_noise = torch.randn(batch_size, nz)`),
    which only shows samples."""
    func = call.func
    return isinstance(func, cst.Attribute) and func.attr.value in _TARGET_FACTORIES \
        and dotted_name(func.value) == "torch"


def _batch_size_expression(loader: Loader) -> Optional[str]:
    given = loader.keywords.get("batch_size")
    if given is None:
        positional = [arg for arg in loader.call.args if arg.keyword is None and not arg.star]
        given = positional[1] if len(positional) >= 2 else None
    return dotted_name(given.value) if given is not None else None


def _rebound_in(loop: cst.For, size: str) -> bool:
    return any(dotted_name(target.target) == size for assign in find_all(loop.body, cst.Assign)
               for target in assign.targets)


def _takes_a_shape(call: cst.Call) -> bool:
    func = call.func
    if isinstance(func, cst.Attribute):
        name = func.attr.value
        return name in _SHAPING_METHODS or (name in _FACTORIES and dotted_name(func.value) == "torch")
    return False


def drop_last_argument(sampler: str) -> str:
    """Only when sharded: as a group of one the loader is the original's, batch for batch."""
    return f"drop_last={sampler} is not None"


def with_drop_last(call: cst.Call, sampler: str) -> cst.Call:
    """The loader call with drop_last_argument after its last argument (before `**kwargs`)."""
    added = cst.Arg(keyword=cst.Name("drop_last"), value=cst.parse_expression(f"{sampler} is not None"),
                    equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
    args = list(call.args)
    index = next((i for i, arg in enumerate(args) if arg.star == "**"), len(args))
    args.insert(index, added)
    return call.with_changes(args=args)


_SHAPED = TRAINING.replace("batch_size=8", "batch_size=batch_size").replace(
    "dataset = TensorDataset", "batch_size = 8\ndataset = TensorDataset").replace(
    "        loss = torch", "        x = x.view(batch_size, -1)\n        loss = torch")

CASES = (
    Emits(_SHAPED, "DDP233", ("drop_last=sampler is not None",)),
    # Sized by the batch itself: every batch fits, full or not.
    Silent(_SHAPED.replace("x = x.view(batch_size, -1)", "x = x.view(x.size(0), -1)"), "DDP233"),
)
