"""Small cases a rule unit keeps beside its code: a few lines of a training script and what
ddpify must do with them. tests/test_rule_cases.py runs the CASES of every unit."""
from dataclasses import dataclass
from typing import Union

from ddpify.options import Options


@dataclass(frozen=True)
class Emits:
    """Migrating `source` reports `code`, and the output holds each of `output_contains`."""

    source: str
    code: str
    output_contains: tuple[str, ...] = ()
    options: Options = Options()  # noqa: B008 (frozen)


@dataclass(frozen=True)
class Silent:
    """A source close to one that reports `code`, where the code must not be reported."""

    source: str
    code: str
    options: Options = Options()  # noqa: B008 (frozen)


@dataclass(frozen=True)
class Flags:
    """The self-check reports `code` on `migrated`, a broken output for `original`: it reads
    ddpify's output, so a correct migration never shows it (tests/test_selfcheck.py)."""

    original: str
    migrated: str
    code: str


Case = Union[Emits, Silent, Flags]


# A training script of the smallest kind, for the cases to start from (`TRAINING.replace(...)`):
# a model moved to the GPU, SGD, a DataLoader over a TensorDataset, an epoch loop.
TRAINING = """\
import torch
from torch.utils.data import DataLoader, TensorDataset

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = torch.nn.Linear(4, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
dataset = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
loader = DataLoader(dataset, batch_size=8, shuffle=True)
for epoch in range(3):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(epoch, loss.item())
"""
