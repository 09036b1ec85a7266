"""torchmetrics objects: their state is gathered from every rank by `compute()`.

Under a process group a `torchmetrics.Metric` all-gathers each rank's accumulated state
when it is computed (`sync_on_compute` is on by default). Two consequences for a migration:
`compute()` is a collective every rank must reach (never inside a rank-0 guard), and an
evaluation loop that only updates such objects may be sharded, since the figure it prints
already covers every rank's share (an unsharded one would count each sample once per rank).
"""
import libcst as cst

from ddpify.analysis.facts import FactRecord
from ddpify.analysis.nodes import dotted_name

METRIC_PACKAGE, METRIC_FUNCTIONS = "torchmetrics.", "torchmetrics.functional."


def metric_names(facts: FactRecord) -> set[str]:
    """The names bound to a torchmetrics object made in this file (`acc =
    torchmetrics.Accuracy(...).to(device)`, `MeanMetric()`, a `MetricCollection`), through
    the calls chained on it; the functional API returns tensors and is left out."""
    found: set[str] = set()
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
            found.update(name for target in targets if (name := dotted_name(target)) is not None)
    return found


def syncs_a_metric(facts: FactRecord, call: cst.Call) -> bool:
    """`accuracy.compute()` on a torchmetrics object: a collective under a process group."""
    return isinstance(call.func, cst.Attribute) and call.func.attr.value == "compute" \
        and dotted_name(call.func.value) in metric_names(facts)
