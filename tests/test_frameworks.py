"""Scripts that another framework already distributes come out byte-identical, with DDP900
naming the framework and the line (issue 10, item 5)."""
import pytest
from cli_support import invoke, write

from ddpify.api import migrate_source

# A loop that trains: without the framework lines, ddpify migrates it.
LOOP = """\
for epoch in range(2):
    for x in loader:
        loss = model(x.float().to(device)).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(loss.item())
"""
HEAD = """\
import torch
from torch.utils.data import DataLoader
{imports}
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
loader = DataLoader(list(range(8)), batch_size=2, shuffle=True)
model = torch.nn.Linear(1, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
{setup}
"""

# (imports, setup lines, the framework named, the text of the line reported)
CASES = {
    "accelerate": ("from accelerate import Accelerator",
                   "accelerator = Accelerator()\n"
                   "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)",
                   "Accelerate", "accelerator = Accelerator()"),
    "fsdp2_fully_shard": ("from torch.distributed.fsdp import fully_shard",
                          "fully_shard(model)", "FSDP", "fully_shard(model)"),
    "fsdp2_composable": ("from torch.distributed._composable.fsdp import fully_shard as shard",
                         "shard(model)", "FSDP", "shard(model)"),
    "fsdp1": ("from torch.distributed.fsdp import FullyShardedDataParallel as FSDP",
              "model = FSDP(model)", "FSDP", "model = FSDP(model)"),
    "deepspeed": ("import deepspeed",
                  "model, optimizer, _, _ = deepspeed.initialize(model=model, optimizer=optimizer)",
                  "DeepSpeed", "model, optimizer, _, _ = deepspeed.initialize("),
    "lightning_trainer": ("import lightning as L",
                          "trainer = L.Trainer(max_epochs=1)", "Lightning", "trainer = L.Trainer("),
    "pytorch_lightning_module": ("import pytorch_lightning as pl",
                                 "class Module(pl.LightningModule):\n    pass",
                                 "Lightning", "class Module(pl.LightningModule):"),
    "horovod": ("import horovod.torch as hvd",
                "hvd.init()\noptimizer = hvd.DistributedOptimizer(optimizer)",
                "Horovod", "hvd.init()"),
}
# Plain torch.distributed, set up by hand in some other way than analysis looks for.
PLAIN = {
    "all_reduce": ("import torch.distributed as dist",
                   "if dist.is_initialized():\n    dist.all_reduce(torch.ones(1))",
                   "if dist.is_initialized():"),
    "spawn": ("import torch.multiprocessing as mp",
              "def worker(rank):\n    pass\nmp.spawn(worker, nprocs=2)", "mp.spawn(worker"),
    "distributed_sampler": ("from torch.utils.data.distributed import DistributedSampler",
                            "sampler = DistributedSampler(list(range(8)), num_replicas=2, rank=0)",
                            "sampler = DistributedSampler("),
}


def _script(imports: str, setup: str) -> str:
    return HEAD.format(imports=imports, setup=setup) + LOOP


def _line_of(text: str, start: str) -> int:
    return next(number for number, line in enumerate(text.splitlines(), 1) if line.startswith(start))


def test_the_loop_alone_is_migrated():
    """Without the framework, the same script is migrated: the cases below test detection."""
    assert migrate_source(_script("", "")).code != _script("", "")


@pytest.mark.parametrize("name", sorted(CASES))
def test_framework_script_is_left_unchanged(name):
    imports, setup, framework, reported = CASES[name]
    text = _script(imports, setup)
    result = migrate_source(text)
    assert result.code == text
    [diagnostic] = result.diagnostics
    assert diagnostic.code == "DDP900"
    assert diagnostic.message == f"already distributed with {framework}: left unchanged"
    assert diagnostic.line == _line_of(text, reported)


@pytest.mark.parametrize("name", sorted(PLAIN))
def test_hand_written_distribution_is_left_unchanged(name):
    imports, setup, reported = PLAIN[name]
    text = _script(imports, setup)
    result = migrate_source(text)
    assert result.code == text
    assert [(d.code, d.line, d.message) for d in result.diagnostics] == [
        ("DDP900", _line_of(text, reported), "already distributed: left unchanged")]


def test_process_group_setup_is_reported_before_other_uses():
    """Where init_process_group is called, that line is the one named (as analysis does)."""
    text = _script("import torch.distributed as dist",
                   "print(dist.is_available())\ndist.init_process_group('gloo')")
    [diagnostic] = migrate_source(text).diagnostics
    assert (diagnostic.line, diagnostic.column) == (_line_of(text, "dist.init_process_group"), 1)


def test_column_counts_characters():
    text = _script("from accelerate import Accelerator", "é = 'ü'; accelerator = Accelerator()")
    [diagnostic] = migrate_source(text).diagnostics
    assert diagnostic.column == len("é = 'ü'; accelerator = ") + 1


def test_an_import_alone_does_not_count():
    """Imported but never used (a leftover import): the script is still single-GPU."""
    text = _script("import accelerate", "")
    assert migrate_source(text).code != text


def test_command_line_exit_code_and_bytes(tmp_path):
    imports, setup, framework, reported = CASES["accelerate"]
    text = _script(imports, setup).replace("\n", "\r\n")
    source = write(tmp_path / "train.py", text, newline="")
    out = tmp_path / "train_ddp.py"
    result = invoke(source, "-o", out)
    assert result.exit_code == 0
    assert out.read_bytes() == source.read_bytes()
    line = _line_of(text, reported)
    assert f"train.py:{line}:15: info: DDP900 already distributed with Accelerate" in result.stderr
    assert invoke("--check", source).exit_code == 0
