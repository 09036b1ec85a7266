"""torchmetrics objects: their state is gathered from every rank by `compute()`.

Under a process group a `torchmetrics.Metric` all-gathers each rank's accumulated state
when it is computed (`sync_on_compute` is on by default). Three consequences for a
migration: `compute()` is a collective every rank must reach (never inside a rank-0 guard);
an evaluation loop that only updates such objects may be sharded, since the figure it prints
already covers every rank's share (an unsharded one would count each sample once per rank);
and a metric left on the CPU gathers CPU tensors, which an NCCL group cannot carry.
"""
from collections.abc import Iterator

import libcst as cst

from ddpify.analysis.facts import FactRecord
from ddpify.analysis.nodes import dotted_name

METRIC_PACKAGE, METRIC_FUNCTIONS = "torchmetrics.", "torchmetrics.functional."
DEVICE_MOVES = ("to", "cuda")


def metric_names(facts: FactRecord) -> set[str]:
    """The names bound to a torchmetrics object made in this file (`acc =
    torchmetrics.Accuracy(...).to(device)`, `MeanMetric()`, a `MetricCollection`), through
    the calls chained on it; the functional API returns tensors and is left out."""
    return {name for name, _ in _made_metrics(facts)}


def syncs_a_metric(facts: FactRecord, call: cst.Call) -> bool:
    """`accuracy.compute()` on a torchmetrics object: a collective under a process group."""
    return isinstance(call.func, cst.Attribute) and call.func.attr.value == "compute" \
        and dotted_name(call.func.value) in metric_names(facts)


def metrics_left_on_the_cpu(facts: FactRecord) -> dict[str, cst.Call]:
    """The metrics whose compute() the file calls and that never move to a device (no
    `.to(...)`/`.cuda()` chained on the constructor or called on the name later), by name,
    with the call that makes each: under NCCL their compute gathers CPU tensors."""
    computed = _receivers_of(facts, ("compute",))
    moved = _receivers_of(facts, DEVICE_MOVES)
    found: dict[str, cst.Call] = {}
    for name, made in _made_metrics(facts):
        chained_move = isinstance(made.func, cst.Attribute) and made.func.attr.value in DEVICE_MOVES
        if name in computed and name not in moved and not chained_move:
            found.setdefault(name, made)
    return found


def _receivers_of(facts: FactRecord, methods: tuple[str, ...]) -> set[str]:
    """The dotted names that `name.method(...)` calls of the file are made on."""
    return {callee.rpartition(".")[0] for callee in facts.calls_by_callee
            if callee.rpartition(".")[2] in methods}


def _made_metrics(facts: FactRecord) -> Iterator[tuple[str, cst.Call]]:
    """Each name a torchmetrics constructor is bound to, with the outermost call of the
    chain that binds it (`torchmetrics.Accuracy(...).to(device)`)."""
    for qualified, calls in facts.calls_named.items():
        if not qualified.startswith(METRIC_PACKAGE) or qualified.startswith(METRIC_FUNCTIONS):
            continue
        for call in calls:
            made: cst.CSTNode = call
            while isinstance(facts.parents.get(made), cst.Attribute) and isinstance(
                    facts.parents.get(facts.parents[made]), cst.Call):
                made = facts.parents[facts.parents[made]]
            assign = facts.parents.get(made)
            targets = [each.target for each in assign.targets] if isinstance(assign, cst.Assign) else \
                [assign.target] if isinstance(assign, cst.AnnAssign) else []
            for target in targets:
                name = dotted_name(target)
                if name is not None and isinstance(made, cst.Call):
                    yield name, made
