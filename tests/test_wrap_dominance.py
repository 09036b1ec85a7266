"""The wrap on every path (DDP935, ddpify/selfcheck/dominance.py): shown to catch a broken
output of each shape, and to stay silent on the output ddpify writes for it. The outputs
below are written the way ddpify writes them; the broken ones are what earlier rounds wrote
(a wrap inside a helper called in one branch) or a wrap moved by hand into a branch."""
import pytest

from ddpify.api import migrate_source
from ddpify.selfcheck import check
from ddpify.selfcheck.dominance import wraps_off_the_training_path
from ddpify.selfcheck.source import Source

HEAD = """\
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

distributed = "WORLD_SIZE" in os.environ
if distributed:
    dist.init_process_group("gloo")
device = torch.device("cpu")
batches = [(torch.randn(4, 3), torch.randn(4, 1)) for _ in range(3)]
"""
LOOP = """\
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for x, y in batches:
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""
WRAP = "if distributed:\n    model = DDP(model)\n"


def findings(code: str) -> list:
    return list(wraps_off_the_training_path(Source(code)))


def test_a_wrap_after_the_join_of_a_resume_branch_is_silent():
    code = HEAD + ("model = torch.nn.Linear(3, 1)\nif os.environ.get('RESUME'):\n"
                   "    model.load_state_dict(torch.load('last.pt'))\n    model.to(device)\nelse:\n"
                   "    model.to(device)\n") + WRAP + LOOP
    assert findings(code) == []


@pytest.mark.parametrize("branch", [
    # The wrap in the fresh branch only: the resumed model trains bare.
    "if os.environ.get('RESUME'):\n    model.load_state_dict(torch.load('last.pt'))\n"
    "    model.to(device)\nelse:\n    model.to(device)\n    if distributed:\n        model = DDP(model)\n",
    # The wrap under the user's own test: the other path trains bare.
    "model.to(device)\nif torch.cuda.device_count() > 1:\n    model = DDP(model)\n",
    # The wrap in a `try` body whose handler goes on.
    "try:\n    model.to('cuda')\n    model = DDP(model)\nexcept RuntimeError:\n    pass\n",
])
def test_a_wrap_on_one_path_only_is_found(branch):
    code = HEAD + "model = torch.nn.Linear(3, 1)\n" + branch + LOOP
    assert [code for code, _, _ in findings(code)] == ["DDP935"]


def test_a_wrap_in_a_helper_called_in_one_branch_is_found():
    helper = ("def load(net, path):\n    net.load_state_dict(torch.load(path))\n    net.to(device)\n"
              "    if distributed:\n        net = DDP(net)\n    return net\n\n\n")
    code = HEAD + helper + ("model = torch.nn.Linear(3, 1)\nif os.environ.get('RESUME'):\n"
                            "    model = load(model, 'last.pt')\nelse:\n    model.to(device)\n") + LOOP
    assert [code for code, _, _ in findings(code)] == ["DDP935"]
    # The same helper called on every path is a wrap on every path.
    assert findings(code.replace("if os.environ.get('RESUME'):\n    model = load", "model = load")
                    .replace("else:\n    model.to(device)\n", "")) == []


def test_a_move_after_the_wrap_on_the_next_pass_of_a_loop_is_found():
    code = HEAD + "model = torch.nn.Linear(3, 1)\n" + LOOP.replace(
        "    for x, y in batches:\n",
        "    model.to(device)\n    if epoch == 0 and distributed:\n        model = DDP(model)\n"
        "    for x, y in batches:\n")
    assert [code for code, _, _ in findings(code)] == ["DDP935"]


def test_a_fresh_model_per_fold_wrapped_in_each_pass_is_silent():
    code = HEAD + ("for fold in range(2):\n    model = torch.nn.Linear(3, 1).to(device)\n"
                   "    if distributed:\n        model = DDP(model)\n") + "\n".join(
        "    " + line if line else line for line in LOOP.splitlines()) + "\n"
    assert findings(code) == []


def test_a_global_model_trained_by_a_function_is_checked_where_it_is_called():
    train = ("def train():\n    for x, y in batches:\n        loss = torch.nn.functional.mse_loss(model(x), y)\n"
             "        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()\n\n\n")
    wrapped_in_branch = HEAD + train + ("model = torch.nn.Linear(3, 1)\nif os.environ.get('CUDA'):\n"
                                        "    model.to('cuda')\n    model = DDP(model)\n"
                                        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\ntrain()\n")
    assert [code for code, _, _ in findings(wrapped_in_branch)] == ["DDP935"]


def test_check_reports_it_on_the_original_line():
    original = HEAD.split("distributed =")[0] + "model = torch.nn.Linear(3, 1)\nmodel.to('cpu')\n" + LOOP
    broken = HEAD + "model = torch.nn.Linear(3, 1)\nif torch.cuda.device_count() > 1:\n" \
        "    model = DDP(model)\n" + LOOP
    assert "DDP935" in {d.code for d in check(original, broken, [])}


RESUMED_BY_A_HELPER = """\
import os

import torch
from torch.utils.data import DataLoader, TensorDataset

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def load_checkpoint(net, path):
    net.load_state_dict(torch.load(path))
    net.to(device)
    return net


model = torch.nn.Linear(3, 1)
if os.environ.get("RESUME"):
    model = load_checkpoint(model, os.environ["RESUME"])
else:
    model.to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(8, 3), torch.randn(8, 1)), batch_size=2, shuffle=True)
for epoch in range(2):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def test_the_wrap_follows_the_join_not_the_helper_called_in_one_branch():
    result = migrate_source(RESUMED_BY_A_HELPER)
    lines = result.code.splitlines()
    wrap = next(i for i, line in enumerate(lines) if "model = DDP(model" in line)
    assert lines[wrap - 1] == "if distributed:" and lines[wrap - 2] == "    model.to(device)"
    assert "net = DDP(" not in result.code and 'getattr(net, "module"' not in result.code
    assert not any(d.code.startswith("DDP9") for d in result.diagnostics)


TRAINER = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class Trainer:
    def __init__(self, batches, use_ddp):
        self.batches = batches
        self.model = torch.nn.Linear(3, 1)
        if use_ddp:
            self.model = DDP(self.model)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)

    def train(self):
        for x, y in self.batches:
            loss = torch.nn.functional.mse_loss(self.model(x), y)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
"""


def test_an_object_left_unwrapped_on_one_path_of_its_init_is_found():
    assert [code for code, _, _ in findings(TRAINER)] == ["DDP935"]
    assert findings(TRAINER.replace("if use_ddp:", "if dist.is_initialized():")) == []
