"""Helpers shared by the command-line tests: a runner with stderr apart, and sample scripts."""
import functools
import inspect
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from fixture_cases import FIXTURES

from ddpify.api import migrate_source
from ddpify.cli import main
from ddpify.diagnostics import is_selected
from ddpify.options import Options
from ddpify.project import Project
from ddpify.rules.registry import RULES

GUIDE = FIXTURES / "guide" / "guide_image_classifier" / "input.py"

# A training script with a diagnostic that needs a person (DDP207: a custom sampler); the
# `needs_a_person` fixture makes sure of the warning whatever the transforms do with it.
NEEDS_A_PERSON = '''\
import torch
from torch.utils.data import DataLoader, TensorDataset, WeightedRandomSampler

model = torch.nn.Linear(4, 1).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
dataset = TensorDataset(torch.randn(8, 4), torch.randn(8, 1))
loader = DataLoader(dataset, sampler=WeightedRandomSampler(torch.ones(8), 8), batch_size=2)
for epoch in range(2):
    for x, y in loader:
        loss = ((model(x.cuda()) - y.cuda()) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(loss.item())
'''

# Mentions torch, trains nothing: ddpify parses it and leaves it alone (DDP901).
NO_TRAINING = "import torch\n\n\ndef ones():\n    return torch.ones(3)\n"


@pytest.fixture
def needs_a_person(monkeypatch):
    """Every migration also reports DDP207 at line 7, so tests of exit codes and formats
    do not hang on which patterns the transforms currently migrate."""
    import ddpify.api
    from ddpify.api import Result
    from ddpify.diagnostics import Diagnostic

    real = ddpify.api.migrate_source

    def with_warning(code, options=Options(), project=Project()):  # noqa: B008 (as migrate_source's)
        result = real(code, options, project)
        warning = Diagnostic("DDP207", 7, 10, RULES["DDP207"].summary, 7)
        if "RandomSampler" not in code or not is_selected("DDP207", options.select, options.ignore):
            return result
        return Result(result.code, tuple(d for d in result.diagnostics if d.code != "DDP207") + (warning,))

    monkeypatch.setattr(ddpify.api, "migrate_source", with_warning)


def runner() -> CliRunner:
    # click < 8.2 mixes stderr into stdout unless asked not to.
    if "mix_stderr" in inspect.signature(CliRunner.__init__).parameters:
        return CliRunner(mix_stderr=False)
    return CliRunner()


def invoke(*args, input=None):
    return runner().invoke(main, [str(arg) for arg in args], input=input, catch_exceptions=False)


def guide_text() -> str:
    return GUIDE.read_text()


@functools.cache
def _migrated(text: str, options: Options) -> str:
    return migrate_source(text, options).code


def migrated(text: str, **options) -> str:
    """What the API writes: the CLI must write exactly this."""
    return _migrated(text, Options(**options))


def write(path: Path, text: str, newline: str = "\n", encoding: str = "utf-8") -> Path:
    path.write_bytes(text.replace("\n", newline).encode(encoding))
    return path


def snapshot(path: Path):
    """Bytes and modification time: what 'untouched' means."""
    return path.read_bytes(), os.stat(path).st_mtime_ns
