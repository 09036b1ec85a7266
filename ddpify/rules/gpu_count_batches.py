"""A batch size scaled by the count of visible GPUs, DataParallel's split (DDP225).

`opt.batch_size = opt.batch_size * torch.cuda.device_count()` feeds DataParallel, which
splits one batch over every GPU: each GPU still takes the per-GPU batch. ddpify replaces
DataParallel with one process per GPU, and under torchrun every process still sees all N
GPUs, so each rank would load N per-GPU batches onto its one GPU (N times the memory, and a
global batch N times the original's). Which batch the person meant is theirs to say:
reported at the line, never rewritten.
"""
from typing import Optional, Union

import libcst as cst

from ddpify.analysis.control import Facts
from ddpify.analysis.nodes import dotted_name
from ddpify.diagnostics import Rule, Severity
from ddpify.emit.edits import Edits
from ddpify.plan import Plan
from ddpify.rules.cases import Emits, Silent

RULES = (
    Rule("DDP225", Severity.WARNING, "batch size scaled by the count of visible GPUs (DataParallel's split)",
         "A batch size multiplied by torch.cuda.device_count() was DataParallel's global batch, split "
         "over the GPUs. Under torchrun every process sees every GPU, so each rank would take N "
         "per-GPU batches on its own GPU: N times the memory, and a global batch N times the original.",
         "Scale by one GPU per process: `n_gpu = 1 if \"WORLD_SIZE\" in os.environ else "
         "torch.cuda.device_count()`, or drop the factor."),
)

GPU_COUNTS = frozenset({"torch.cuda.device_count", "torch.accelerator.device_count"})


def plan(facts: Facts, edits: Edits, setup: Plan) -> None:
    """Rule: in a project that uses DataParallel, an assignment to a name of a batch size
    (`batch` in its last part: the one name heuristic here, reported as such) whose value
    multiplies by a GPU count (`torch.cuda.device_count()`, through `max(1, n)` or a name
    bound only to one) is DataParallel's split: DDP225 at the line."""
    if not (facts.data_parallel_calls or facts.data_parallel_in_project):
        return
    counts = {call for qualified in GPU_COUNTS for call in facts.calls_named.get(qualified, ())}
    if not counts:
        return
    assignments: list[Union[cst.Assign, cst.AugAssign]] = [
        *facts.nodes_of(cst.Assign), *facts.nodes_of(cst.AugAssign)]
    for node in assignments:
        targets = [each.target for each in node.targets] if isinstance(node, cst.Assign) else [node.target]
        named = [dotted_name(target) for target in targets]
        batch = next((name for name in named if name and "batch" in name.rsplit(".", 1)[-1].lower()), None)
        if batch is None:
            continue
        factor = _gpu_count_factor(facts, node, counts)
        if factor is not None:
            edits.report("DDP225", node, (
                f"`{batch}` is multiplied by the count of visible GPUs (`{edits.code(factor)}`), DataParallel's "
                "split, which ddpify replaces with one process per GPU: under torchrun each rank would take "
                "that many per-GPU batches on its own GPU; scale by 1 per process (`1 if \"WORLD_SIZE\" in "
                "os.environ else torch.cuda.device_count()`), or drop the factor"))


def _gpu_count_factor(facts: Facts, node: Union[cst.Assign, cst.AugAssign],
                      counts: set[cst.Call]) -> Optional[cst.BaseExpression]:
    """The operand of the product that counts GPUs, if any."""
    if isinstance(node, cst.AugAssign):
        if isinstance(node.operator, cst.MultiplyAssign) and _counts_gpus(facts, node.value, counts):
            return node.value
        return None
    value = node.value
    if not isinstance(value, cst.BinaryOperation) or not isinstance(value.operator, cst.Multiply):
        return None
    for operand in (value.left, value.right):
        if _counts_gpus(facts, operand, counts):
            return operand
    return None


def _counts_gpus(facts: Facts, value: cst.BaseExpression, counts: set[cst.Call], depth: int = 0) -> bool:
    if value in counts:
        return True
    if depth > 2:
        return False
    if isinstance(value, cst.Call) and dotted_name(value.func) in ("max", "min"):
        # `max(1, n_gpu)`: the count, or one where there is no GPU.
        return any(_counts_gpus(facts, arg.value, counts, depth + 1) for arg in value.args)
    name = dotted_name(value)
    bound = facts.assigned_values.get(name, []) if name is not None else []
    return bool(bound) and all(_counts_gpus(facts, each, counts, depth + 1) for each in bound)


_DATA_PARALLEL = """\
import torch
from torch.utils.data import DataLoader, TensorDataset

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
batch_size = 16
n_gpu = torch.cuda.device_count()
if n_gpu > 1:
    batch_size = batch_size * n_gpu
model = torch.nn.Linear(4, 1)
if n_gpu > 1:
    model = torch.nn.DataParallel(model)
model = model.to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=batch_size, shuffle=True)
for epoch in range(3):
    for x, y in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()
"""

CASES = (
    Emits(_DATA_PARALLEL, "DDP225"),
    Emits(_DATA_PARALLEL.replace("batch_size = batch_size * n_gpu", "batch_size *= max(1, n_gpu)"), "DDP225"),
    # No DataParallel: the product is the person's own global batch, not a split to undo.
    Silent(_DATA_PARALLEL.replace("    model = torch.nn.DataParallel(model)", "    model = model.float()"), "DDP225"),
    # A learning rate scaled by the GPU count is not a batch.
    Silent(_DATA_PARALLEL.replace("batch_size = batch_size * n_gpu", "lr = 0.1 * n_gpu"), "DDP225"),
)
