"""DDP956 and DDP957 (ddpify/selfcheck/nccl_tensors.py): what NCCL on a GPU machine refuses in
an output that a CPU run under Gloo takes, read in several spellings, and what it leaves alone."""
import pytest

from ddpify.selfcheck.nccl_tensors import cpu_tensors_in_collectives, loads_without_map_location
from ddpify.selfcheck.source import Source

NCCL_OR_GLOO = 'dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")\n'
BY_DEVICE = "dist.init_process_group(dist.get_default_backend_for_device(device))\n"
MIXED = 'dist.init_process_group("cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo")\n'
HEAD = "import torch\nimport torch.distributed as dist\n\ndevice = torch.device('cuda')\n"


def _codes(join: str, body: str) -> list[str]:
    source = Source(HEAD + join + body)
    return [code for code, _line, _detail in [*cpu_tensors_in_collectives(source), *loads_without_map_location(source)]]


@pytest.mark.parametrize("body", [
    "totals = torch.tensor([running_loss, correct], dtype=torch.float64)\ndist.all_reduce(totals)\n",
    "dist.all_reduce(torch.tensor([running_loss]))\n",
    "stop = torch.zeros(1, device='cpu')\ndist.broadcast(stop, src=0)\n",
    "sizes = [torch.zeros(1, dtype=torch.long) for _ in range(2)]\ndist.all_gather(sizes, n.to(device))\n",
    "def summed(total):\n    t = torch.tensor(total)\n    dist.all_reduce(t, op=dist.ReduceOp.SUM)\n"
    "    return t.item()\n",
])
@pytest.mark.parametrize("join", [NCCL_OR_GLOO, BY_DEVICE, ""])
def test_a_cpu_tensor_handed_to_a_collective_where_nccl_may_be_alone_is_found(join, body):
    assert _codes(join, body) == ["DDP956"]


@pytest.mark.parametrize("body", [
    "totals = torch.tensor([running_loss], dtype=torch.float64, device=device)\ndist.all_reduce(totals)\n",
    "totals = torch.tensor([running_loss]).to(device)\ndist.all_reduce(totals)\n",
    "totals = torch.tensor([running_loss])\ntotals = totals.cuda()\ndist.all_reduce(totals)\n",
    "def summed(t):\n    dist.all_reduce(t)\n",  # handed in: not known here
    "dist.all_reduce(loss.detach())\n",
])
def test_a_tensor_on_the_device_or_not_known_to_be_made_here_is_left(body):
    assert _codes(NCCL_OR_GLOO, body) == []


def test_a_group_with_gloo_for_the_cpu_takes_cpu_tensors():
    body = "totals = torch.tensor([running_loss], dtype=torch.float64)\ndist.all_reduce(totals)\n"
    assert _codes(MIXED, body) == []
    assert _codes('dist.init_process_group("gloo")\n', body) == []
    assert _codes(MIXED + NCCL_OR_GLOO, body) == ["DDP956"]  # one group NCCL alone: it may be that one


@pytest.mark.parametrize("load, codes", [
    ("torch.load(path)", ["DDP957"]),
    ("torch.load(path, weights_only=True)", ["DDP957"]),
    ("torch.load(path, map_location=device)", []),
    ("torch.load(path, 'cpu')", []),
    ("torch.load(path, **options)", []),
])
def test_a_load_without_map_location_is_found(load, codes):
    assert _codes(NCCL_OR_GLOO, f"state = {load}\n") == codes
