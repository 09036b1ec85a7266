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
# Recurrent-state makers besides any `*hidden*` call (gluon's begin_state, TF-style zero_state).
_STATE_MAKERS = frozenset({"begin_state", "init_state", "zero_state", "initial_state"})


def shaped_by_batch_size(facts: Facts, loader: Loader) -> Optional[cst.CSTNode]:
    """Rule: where a training pass over the loader reads the loader's batch size as a dimension
    of a tensor, or hands it to a model's hidden state (`init_hidden(batch_size)`), and nothing
    in the pass rebinds it from the batch (`batch_size = images.size(0)`), that read; None where
    the loader already drops its last batch. The batch size is known by value, not by one name:
    see _batch_size_spellings."""
    if loader.keywords.get("drop_last") is not None:
        return None  # (a drop_last the script set, either way, is its own choice)
    spellings = _batch_size_spellings(facts, loader)
    if not spellings:
        return None
    for loop in facts.loops_over_values(facts.loader_holders_of(loader)):
        if not facts.loop_trains(loop) or _rebound_in(facts, loop, spellings):
            continue
        shaped = _shape_read(facts, find_all(loop.body, cst.Call), spellings) or _shape_read(
            facts, _calls_made_for_the_loop(facts, loop), spellings)
        if shaped is not None:
            return shaped
    return None


def _batch_size_spellings(facts: Facts, loader: Loader) -> frozenset[str]:
    """The expressions, as written, that hold the loader's batch size: its argument
    (`args.batch_size`, `config["batch_size"]`, `BATCH_SIZE`, `10`), the names bound once to one
    of them or that one of them is bound to (`bs = args.batch_size`, `BATCH_SIZE = 10`: a
    literal is followed from its name only, so `HIDDEN = 10` stays apart), and the loader's own
    `.batch_size` under each name that holds it."""
    given = _batch_size_argument(loader)
    if given is None:
        return frozenset()
    spellings = {facts.module.code_for_node(given)}
    bound_once = _names_bound_once(facts)
    grown = True
    while grown:
        grown = False
        for name, value in bound_once.items():
            reaches = name in spellings or (value in spellings and not _is_literal(value))
            if reaches and not {name, value} <= spellings:
                spellings |= {name, value}
                grown = True
    spellings |= {f"{name}.batch_size" for _, name in facts.loader_holders_of(loader)}
    return frozenset(spellings)


def _names_bound_once(facts: Facts) -> dict[str, str]:
    """Each name the module binds by exactly one plain assignment, with its value as written."""
    values: dict[str, list[str]] = {}
    for assign in find_all(facts.module, cst.Assign):
        for target in assign.targets:
            if isinstance(target.target, cst.Name):
                values.setdefault(target.target.value, []).append(facts.module.code_for_node(assign.value))
    return {name: written[0] for name, written in values.items() if len(written) == 1}


def _is_literal(code: str) -> bool:
    return code.isdigit()


def _shape_read(facts: Facts, calls: list[cst.Call], spellings: frozenset[str]) -> Optional[cst.CSTNode]:
    for call in calls:
        if _takes_a_shape(call):
            for position, arg in enumerate(call.args):
                written = facts.module.code_for_node(arg.value)
                # A number equal to the batch size is the batch only as the first dimension:
                # `torch.randn(n, 8)` with a batch of 8 is a noise width.
                if written in spellings and (position == 0 or not _is_literal(written)):
                    return arg.value
    return None


def _calls_made_for_the_loop(facts: Facts, loop: cst.For) -> list[cst.Call]:
    """The calls of assignments above the loop, in its function (or at the top level), of
    names the loop reads: labels or a hidden state made once for every batch (`real_labels =
    torch.ones(batch_size, 1)` before `for images, _ in loader:`)."""
    read = {dotted_name(node) for node in find_all(loop.body, cst.Name)}
    scope = facts.function_of(loop)
    calls: list[cst.Call] = []
    for assign in find_all(scope.body if scope is not None else facts.module, cst.Assign):
        if facts.function_of(assign) is not scope or facts.line_of(assign) >= facts.line_of(loop):
            continue
        if any(dotted_name(target.target) in read for target in assign.targets):
            calls.extend(call for call in find_all(assign.value, cst.Call)
                         if _makes_targets(call) or _makes_a_hidden_state(call))
    return calls


def _makes_targets(call: cst.Call) -> bool:
    """`torch.ones(batch_size, 1)`, `torch.full((batch_size,), 1.0)`: constant targets, which meet
    every batch in the loss. Not noise drawn once (`fixed_noise = torch.randn(batch_size, nz)`),
    which only shows samples."""
    func = call.func
    return isinstance(func, cst.Attribute) and func.attr.value in _TARGET_FACTORIES \
        and dotted_name(func.value) == "torch"


def _makes_a_hidden_state(call: cst.Call) -> bool:
    """`model.init_hidden(batch_size)`, `rnn.begin_state(batch_size)`: a recurrent state with one
    row per sample, which a smaller batch does not fit."""
    func = call.func
    name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
    return "hidden" in name or name in _STATE_MAKERS


def _batch_size_argument(loader: Loader) -> Optional[cst.BaseExpression]:
    given = loader.keywords.get("batch_size")
    if given is None:
        positional = [arg for arg in loader.call.args if arg.keyword is None and not arg.star]
        given = positional[1] if len(positional) >= 2 else None
    return given.value if given is not None else None


def _rebound_in(facts: Facts, loop: cst.For, spellings: frozenset[str]) -> bool:
    return any(facts.module.code_for_node(target.target) in spellings
               for assign in find_all(loop.body, cst.Assign) for target in assign.targets)


def _takes_a_shape(call: cst.Call) -> bool:
    func = call.func
    if isinstance(func, cst.Attribute):
        name = func.attr.value
        return name in _SHAPING_METHODS or (name in _FACTORIES and dotted_name(func.value) == "torch") \
            or _makes_a_hidden_state(call)
    return _makes_a_hidden_state(call)


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
    # Known by value: an alias of the batch size, and a hidden state made per batch.
    Emits(_SHAPED.replace("batch_size = 8", "batch_size = 8\nbs = batch_size").replace(
        "x.view(batch_size, -1)", "x.view(bs, -1)"), "DDP233", ("drop_last=sampler is not None",)),
    Emits(_SHAPED.replace("x = x.view(batch_size, -1)", "h = model.init_hidden(batch_size)"), "DDP233",
          ("drop_last=sampler is not None",)),
    # Another size that happens to equal it is not the batch size: `HIDDEN = 8` stays apart.
    Silent(_SHAPED.replace("batch_size = 8", "batch_size = 8\nhidden = 8").replace(
        "x.view(batch_size, -1)", "x.view(hidden, -1)"), "DDP233"),
)
