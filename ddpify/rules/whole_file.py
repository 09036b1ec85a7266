"""Verdicts on a whole file: left unchanged because it is already distributed, trains nothing,
feeds its training by hand, or is run by another file (DDP900, DDP901, DDP904, DDP905), a
helper module migrated for callers out of view (DDP918), training through an object
ddpify reads on one path only (DDP921), and batches handed to an object ddpify cannot follow
(DDP937).

The decisions are taken in api.py (and frameworks.py for another framework's scripts); this
unit holds their rules and cases.
"""
from ddpify.diagnostics import Rule, Severity
from ddpify.rules.cases import TRAINING, Emits, Silent

RULES = (
    Rule("DDP900", Severity.INFO, "already distributed: left unchanged",
         "The script already initialises a process group or wraps a model in DDP.",
         "Nothing to do."),
    Rule("DDP901", Severity.INFO, "no training code found: left unchanged",
         "ddpify found no optimizer step, backward pass or DataLoader to migrate.",
         "Nothing to do."),
    Rule("DDP904", Severity.WARNING, "no DataLoader that ddpify can shard feeds the training: left single-process",
         "Every training step takes data the script slices or builds itself (or the whole "
         "data set at once, or from loaders kept in a dict), so no DistributedSampler can be "
         "added to it. Wrapping the model in "
         "DDP would only make every rank repeat the same work; full-batch training gains "
         "nothing from DDP at all.",
         "Shard the data by rank yourself (x[rank::world_size], the same number of steps on "
         "every rank) and wrap the model in DDP, or keep this script on one process."),
    Rule("DDP905", Severity.WARNING, "training code that runs only when another file calls it: left unchanged",
         "Nothing in this module runs it: a script elsewhere imports it (a Trainer class, an "
         "engine's train_one_epoch). Its prints, saves and loaders would run on every rank, "
         "and the model it trains may never be wrapped.",
         "Migrate the script that runs the training, then guard this module's output with "
         "`if not dist.is_initialized() or dist.get_rank() == 0:` and give its training loader "
         "a DistributedSampler (with set_epoch) by hand."),
    Rule("DDP921", Severity.WARNING, "training through an object that is a training class of the project on one path "
         "only: the call is left as it is",
         "`trainer = Trainer(...)` in one branch and `trainer = OtherTrainer(...)` (from a "
         "package, a registry or a name no module of the project defines) in another, then "
         "`trainer.train()`. ddpify cannot tell whether the call trains, so the process group "
         "is not set up around it; yet the project's Trainer module is migrated (its wrap, "
         "samplers and rank-0 guards wait for a process group), and under torchrun every rank "
         "would train the whole data set on its own.",
         "Build the trainer from classes of the project on every path, or set up the process "
         "group by hand before the call (`dist.init_process_group()`, the rank's device from "
         "LOCAL_RANK) and tear it down after it."),
    Rule("DDP937", Severity.WARNING, "the training batches go to an object ddpify cannot follow: left unchanged",
         "A training loader of this file hands its batches to a method of an object made by a "
         "call ddpify cannot read (`model = get_model(opt)`, a factory that picks a class by "
         "name, then `model.set_input(data)` and `model.optimize_parameters()`). The training "
         "steps may run in there; ddpify finds none in this file, so it leaves it as it is, and "
         "under torchrun every rank would train the whole data set on its own.",
         "Build the object from a class of the project by name where ddpify can see it, or "
         "migrate by hand: set up the process group, wrap the networks the object trains in DDP "
         "after they reach their device, and give the loader a DistributedSampler (with "
         "set_epoch)."),
    Rule("DDP918", Severity.WARNING, "helper module migrated for callers no file of the project shows",
         "Nothing in this module runs its training code and no module of the project imports "
         "it (a notebook's helpers, an engine used by another repository). Its output, saves "
         "and the loaders it builds are migrated as for a helper module, so that it works under "
         "torchrun and in one process; but the process group, the DDP wrap and the samplers of "
         "the loaders it is handed belong to the caller, which ddpify has not seen.",
         "Run ddpify on the script that calls this module (it migrates the caller and this "
         "module together), or set up the process group, wrap the model and shard its loaders "
         "there by hand."),
)


_FACTORY_MODEL = """\
import torch
from torch.utils.data import DataLoader, TensorDataset

from models import create_model

dataset = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
train_loader = DataLoader(dataset, batch_size=8, shuffle=True)
model = create_model("pix2pix")
for epoch in range(3):
    for data in train_loader:
        model.set_input(data)
        model.optimize_parameters()
"""

CASES = (
    Emits(_FACTORY_MODEL, "DDP937"),
    # A loader that does not look like training data (a test set, in order): an evaluation.
    Silent(_FACTORY_MODEL.replace("train_loader", "test_loader").replace("shuffle=True", "shuffle=False"),
           "DDP937"),
    Emits(TRAINING.replace("import torch\n", "import torch\nimport torch.distributed as dist\n", 1)
          .replace("device = torch", 'dist.init_process_group("nccl")\ndevice = torch'), "DDP900"),
    Silent(TRAINING, "DDP900"),
    Emits("import torch\n\nx = torch.ones(3)\nprint(x.sum())\n", "DDP901"),
    # A backward for the input's gradient alone (a saliency map, an attack) trains nothing.
    Emits("import torch\n\nmodel = torch.nn.Linear(4, 2)\nx = torch.randn(3, 4, requires_grad=True)\n"
          "loss = model(x).sum()\nloss.backward()\nprint(x.grad.abs())\n", "DDP901"),
    Silent("import torch\n\nmodel = torch.nn.Linear(4, 2)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
           "x = torch.randn(3, 4, requires_grad=True)\nloss = model(x).sum()\nloss.backward()\nopt.step()\n"
           "print(x.grad.abs())\n", "DDP901"),
    # An optimizer that only drives a learning-rate scheduler (a schedule printed) trains nothing.
    Emits("import torch\n\nmodel = torch.nn.Linear(4, 2)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
          "sched = torch.optim.lr_scheduler.StepLR(opt, 10)\nfor step in range(30):\n    sched.step()\n"
          "    print(opt.param_groups[0]['lr'])\n", "DDP901"),
    # ...nor one that steps its own tensors by hand: that trains.
    Silent("import torch\n\nx = torch.randn(8, 3)\nw = torch.zeros(3, requires_grad=True)\nfor step in range(5):\n"
           "    loss = (x @ w).pow(2).mean()\n    loss.backward()\n    with torch.no_grad():\n"
           "        w -= 0.1 * w.grad\n        w.grad.zero_()\n", "DDP901"),
    Emits(TRAINING.replace("    for x, y in loader:\n", "    for x, y in [(inputs, targets)]:\n")
          .replace("dataset = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))\n"
                   "loader = DataLoader(dataset, batch_size=8, shuffle=True)\n",
                   "inputs, targets = torch.randn(64, 4), torch.randn(64, 1)\n"),
          "DDP904", ("for x, y in [(inputs, targets)]:",)),
    Emits('''\
import torch


def train_one_epoch(model, optimizer, loader, device):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
''', "DDP905"),  # (read without a project: in a project's folder it is DDP918, fixtures/helper_modules)
    # A test module: pytest runs it, in one process.
    Silent('''\
import torch


def test_loss_goes_down():
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    for _ in range(5):
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
''', "DDP918"),
    # Only a private function trains, and nothing public reaches it: no caller can run it.
    Emits('''\
import torch


def _train_one_epoch(model, optimizer, loader, device):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
''', "DDP905"),
)
