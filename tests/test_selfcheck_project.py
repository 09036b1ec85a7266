"""The self-check over a migrated project (ddpify/selfcheck/project.py): the entry joins the
process group, the optimizer steps in another module, and no module of the run wraps the
model. Each file passes its own self-check; only the project as a whole shows that every
rank trains its own copy (DDP911). ddpify migrates these projects correctly, so the check
is shown on the real migration of a project with its wrap planted out (a hand-broken tree)."""
from dataclasses import replace
from pathlib import Path

import pytest
from cli_support import invoke

from ddpify import project_jobs
from ddpify.jobs import OK, PENDING, PendingWrite, prepare
from ddpify.options import Options
from ddpify.selfcheck.project import Module, unwrapped_training

ENGINE = '''import torch


def run_epochs(forward, optimizer, loader, epochs):
    for epoch in range(epochs):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(forward(x.cuda()), y.cuda())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(epoch, loss.item())
'''

TRAIN = '''import torch
from torch.utils.data import DataLoader, TensorDataset

from engine import run_epochs


def main():
    dataset = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = DataLoader(dataset, batch_size=8, shuffle=True)
    net = torch.nn.Linear(4, 1).cuda()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    run_epochs(lambda x: net(x), optimizer, loader, 3)
    torch.save(net.state_dict(), "model.pt")


if __name__ == "__main__":
    main()
'''

WRAP = "    if distributed:\n        net = DDP(net)\n"


def _project(tmp_path: Path) -> Path:
    source = tmp_path / "project"
    source.mkdir()
    (source / "engine.py").write_text(ENGINE)
    (source / "train.py").write_text(TRAIN)
    return source


@pytest.fixture
def migrated_project(tmp_path: Path):
    """(jobs, reports) of `ddpify train.py -o out/` on the project, prepared, nothing written."""
    source = _project(tmp_path)
    tree = project_jobs.Tree(str(source), (str(source / "train.py"), str(source / "engine.py")),
                             str(tmp_path / "out"), entry=str(source / "train.py"))
    jobs = project_jobs.tree_jobs(tree, Options())
    return jobs, [prepare(job) for job in jobs]


def _text(report) -> str:
    return report.pending.data.decode()


def _unwrapped(reports):
    """The reports with the wrap deleted from the migrated entry."""
    broken = []
    for report in reports:
        if report.pending is not None and WRAP in _text(report):
            pending = PendingWrite(report.pending.path, _text(report).replace(WRAP, "").encode())
            report = replace(report, pending=pending, diagnostics=tuple(report.diagnostics))
        broken.append(report)
    return broken


def test_correct_migration_passes(migrated_project):
    jobs, reports = migrated_project
    assert any(WRAP in _text(report) for report in reports), "the migration wraps the model"
    codes = [d.code for report in reports for d in report.diagnostics]
    project_jobs.check_project(jobs, reports)
    assert [d.code for report in reports for d in report.diagnostics] == codes
    assert all(report.exit_code == OK for report in reports)


def test_a_project_trained_with_no_wrap_fails_on_the_optimizer_step(migrated_project):
    jobs, reports = migrated_project
    broken = _unwrapped(reports)
    project_jobs.check_project(jobs, broken)
    engine = next(report for report in broken if report.path.endswith("engine.py"))
    found = [d for d in engine.diagnostics if d.code == "DDP911"]
    assert len(found) == 1
    assert found[0].line == ENGINE.splitlines().index("            optimizer.step()") + 1
    assert "optimizer.step()" in found[0].message and "DDP(model" in found[0].message
    assert engine.exit_code == PENDING


@pytest.mark.parametrize("why", ["DDP903", "DDP904"])
def test_a_reported_choice_is_not_flagged_again(migrated_project, why):
    jobs, reports = migrated_project
    broken = _unwrapped(reports)
    modules = [Module(r.path, _text(r), frozenset({why} if r.path.endswith("train.py") else ()))
               for r in broken]
    assert unwrapped_training(modules) is None


@pytest.mark.parametrize("elsewhere", [
    "model = FSDP(model)\n",
    "fully_shard(model)\n",
    "model = torch.nn.parallel.DistributedDataParallel(model)\n",
    "from accelerate import Accelerator\n",
])
def test_a_wrap_in_any_module_of_the_run_counts(elsewhere):
    entry = "import torch.distributed as dist\ndist.init_process_group()\n"
    modules = [Module("train.py", entry, frozenset()), Module("engine.py", ENGINE, frozenset()),
               Module("wrap.py", elsewhere, frozenset())]
    assert unwrapped_training(modules) is None
    assert unwrapped_training(modules[:2]) is not None


@pytest.mark.parametrize("step", ["scheduler.step()", "self.lr_scheduler.step()"])
def test_a_scheduler_step_is_not_an_optimizer_step(step):
    engine = ENGINE.replace("optimizer.step()", step)
    modules = [Module("train.py", "import torch.distributed as dist\ndist.init_process_group()\n", frozenset()),
               Module("engine.py", engine, frozenset())]
    assert unwrapped_training(modules) is None


def test_a_process_group_of_the_users_own_is_not_the_runs_doing():
    """An entry that joins the group itself is left as it is (DDP900; check_distributed
    looks at it on its own): the run added no process group."""
    entry = "import torch.distributed as dist\ndist.init_process_group()\n"
    modules = [Module("train.py", entry, frozenset(), entry), Module("engine.py", ENGINE, frozenset(), ENGINE)]
    assert unwrapped_training(modules) is None


def test_no_process_group_no_finding():
    modules = [Module("train.py", TRAIN, frozenset()), Module("engine.py", ENGINE, frozenset())]
    assert unwrapped_training(modules) is None


@pytest.mark.parametrize("mode", ["-o", "-i"])
def test_the_command_line_fails_on_a_planted_unwrapped_project(tmp_path, monkeypatch, mode):
    """`ddpify train.py -o OUT/` and `ddpify -i train.py` run the project's self-check on the
    prepared files: with the wrap planted out of the migration, the run exits 1 naming the step."""
    source = _project(tmp_path)
    check_project = project_jobs.check_project

    def planted(jobs, reports):
        reports[:] = _unwrapped(reports)
        check_project(jobs, reports)

    monkeypatch.setattr(project_jobs, "check_project", planted)
    args = ["-o", f"{tmp_path / 'out'}/", source / "train.py"] if mode == "-o" else ["-i", source / "train.py"]
    result = invoke(*args, "-j", "1")
    line = ENGINE.splitlines().index("            optimizer.step()") + 1
    assert result.exit_code == 1, result.stderr
    assert f"engine.py:{line}:1: warning: DDP911" in result.stderr


@pytest.mark.parametrize("mode", ["-o", "-i"])
def test_the_command_line_passes_the_correct_migration(tmp_path, mode):
    source = _project(tmp_path)
    args = ["-o", f"{tmp_path / 'out'}/", source / "train.py"] if mode == "-o" else ["-i", source / "train.py"]
    result = invoke(*args)
    assert result.exit_code == 0, result.stderr
    assert "DDP911" not in result.stderr


RUNNER = '''class Runner:
    def __init__(self, model, loader, optimizer):
        self.model, self.loader, self.optimizer = model, loader, optimizer

    def run_epoch(self):
        for x, y in self.loader:
            loss = torch.nn.functional.mse_loss(self.model(x), y)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
'''

SET_EPOCH = "        if sampler is not None:\n            sampler.set_epoch(epoch)\n"


def _runner_project(tmp_path: Path) -> Path:
    """The loader goes to a Runner of another module, which keeps it by a pairwise assignment;
    the entry's loop calls run_epoch()."""
    source = tmp_path / "project"
    source.mkdir()
    (source / "engine.py").write_text("import torch\n\n\n" + RUNNER)
    (source / "train.py").write_text(TRAIN.replace("from engine import run_epochs", "from engine import Runner")
                                     .replace("    run_epochs(lambda x: net(x), optimizer, loader, 3)\n",
                                              "    runner = Runner(net, loader, optimizer)\n"
                                              "    for epoch in range(3):\n        runner.run_epoch()\n"))
    return source


def _prepared(tmp_path: Path, source: Path):
    tree = project_jobs.Tree(str(source), (str(source / "train.py"), str(source / "engine.py")),
                             str(tmp_path / "out"), entry=str(source / "train.py"))
    jobs = project_jobs.tree_jobs(tree, Options())
    return jobs, [prepare(job) for job in jobs]


def test_a_sampler_no_module_gives_an_epoch_fails_where_it_is_made(tmp_path):
    """The migration sets the epoch in the entry's loop; with that planted out, no module of the
    project sets it, which no file's own check can see (the loader is handed on): DDP912."""
    jobs, reports = _prepared(tmp_path, _runner_project(tmp_path))
    entry = next(report for report in reports if report.path.endswith("train.py"))
    assert SET_EPOCH in _text(entry), "the migration sets the epoch in the entry's loop"
    project_jobs.check_project(jobs, reports)
    assert all(report.exit_code == OK for report in reports)
    broken = [replace(report, pending=PendingWrite(report.pending.path, _text(report).replace(SET_EPOCH, "").encode()))
              if report is entry else report for report in reports]
    project_jobs.check_project(jobs, broken)
    found = [d for report in broken for d in report.diagnostics if d.code == "DDP912"]
    assert len(found) == 1 and "any module of the project" in found[0].message
    assert next(report for report in broken if report.path.endswith("train.py")).exit_code == PENDING


METRICS = '''import torch


def accuracy(model, loader, device, num_batches=None):
    model.eval()
    correct, seen = 0, 0
    num_batches = len(loader) if num_batches is None else min(num_batches, len(loader))
    for i, (inputs, targets) in enumerate(loader):
        if i >= num_batches:
            break
        with torch.no_grad():
            correct += (model(inputs.to(device)).argmax(dim=-1) == targets.to(device)).sum().item()
        seen += targets.shape[0]
    return correct / seen
'''
MEASURED_TRAIN = '''import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from metrics import accuracy

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
train_loader = DataLoader(TensorDataset(torch.randn(64, 5), torch.randint(0, 2, (64,))), batch_size=8, shuffle=True)
model = nn.Linear(5, 2).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for x, y in train_loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x.to(device)), y.to(device)).backward()
        optimizer.step()
    print(epoch, accuracy(model, train_loader, device, 3))
'''


def test_the_training_loader_measured_in_another_module_without_a_gather_fails_there(tmp_path):
    """The training loader's DistributedSampler share handed to a metrics module whose capped
    loop ddpify leaves whole (it can stop early): rank 0 would print its share's accuracy as the
    whole set's. The migration says so at the call (DDP213, exit 1), as it does with the helper in
    the script's own file; the self-check (DDP943) does not repeat it. Without the cap,
    also called on a validation loader, the helper reads its loader through evaluation_share and
    gathers: silent."""
    uncapped = METRICS.split("def ")[0] + '''def accuracy(model, loader, device):
    model.eval()
    correct, seen = 0, 0
    with torch.no_grad():
        for inputs, targets in loader:
            correct += (model(inputs.to(device)).argmax(dim=-1) == targets.to(device)).sum().item()
            seen += targets.shape[0]
    return correct / seen
'''
    validated = MEASURED_TRAIN.replace("model = nn", "val_loader = DataLoader(TensorDataset(torch.randn(30, 5), "
                                       "torch.randint(0, 2, (30,))), batch_size=8)\nmodel = nn") + (
        "print(accuracy(model, val_loader, device))\n").replace(", device, 3))", ", device))")
    # The migration now reports the capped pass itself at the call (DDP213, as in one file), and
    # the self-check does not say it again.
    for metrics, train, expected in ((METRICS, MEASURED_TRAIN, [("train.py", "DDP213")]), (uncapped, validated, [])):
        source = tmp_path / f"case{len(expected)}"
        source.mkdir()
        (source / "metrics.py").write_text(metrics)
        (source / "train.py").write_text(train)
        tree = project_jobs.Tree(str(source), (str(source / "train.py"), str(source / "metrics.py")),
                                 str(source / "out"), entry=str(source / "train.py"))
        jobs = project_jobs.tree_jobs(tree, Options())
        reports = [prepare(job) for job in jobs]
        project_jobs.check_project(jobs, reports)
        found = [(Path(report.path).name, d.code) for report in reports for d in report.diagnostics
                 if d.code in ("DDP943", "DDP213")]
        assert found == expected
