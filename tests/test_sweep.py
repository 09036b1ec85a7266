"""A fixed sample of the robustness sweep (benchmarks/sweep.py) over installed packages."""
import ast
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import sweep  # noqa: E402
from fixture_cases import all_cases  # noqa: E402

from ddpify.analysis.effects import FunctionEffects  # noqa: E402
from ddpify.api import migrate_source  # noqa: E402

_FILES = None


def _installed_files():
    global _FILES
    if _FILES is None:
        _FILES = sweep.python_files(sweep.site_packages())
    return _FILES


def _assert_no_findings(records):
    findings = [record for record in records if record.outcome in sweep.FINDINGS]
    assert not findings, "\n\n".join(f"{r.outcome}: {r.path}\n{r.details}" for r in findings)


@pytest.mark.slow  # a process-level shell test of several seconds; CI runs it
def test_small_torch_files():
    """Fast: 20 small files that mention torch (they reach analysis and the transforms)."""
    small = [path for path in _installed_files() if os.path.getsize(path) < 8000]
    paths = sweep.select(small, torch_only=True, sample=20, seed=0)
    assert len(paths) == 20
    _assert_no_findings([sweep.check_file(path, limit_s=60) for path in paths])


@pytest.mark.slow
def test_sample_of_site_packages():
    """150 files of any kind, fixed seed; about a minute."""
    paths = sweep.select(_installed_files(), torch_only=False, sample=150, seed=0)
    records = [sweep.check_file(path, limit_s=120) for path in paths]
    _assert_no_findings(records)
    assert sum(record.outcome == sweep.TIMEOUT for record in records) == 0


def test_a_crash_is_caught(tmp_path, monkeypatch):
    """The sweep's judgement can fail: a bug in a transform is a crash, not a syntax error."""
    import ddpify.api

    script = tmp_path / "train.py"
    script.write_text("import torch\nloss.backward()\noptimizer.step()\n")

    def broken(code, options=None, project=None):
        raise ddpify.api.MigrationError("internal error: KeyError('x')")

    monkeypatch.setattr(ddpify.api, "migrate_source", broken)
    assert sweep.check_file(str(script)).outcome == sweep.CRASH


def test_an_unwanted_change_is_caught(tmp_path, monkeypatch):
    import ddpify.api

    library = tmp_path / "library.py"
    library.write_text("import torch\n\n\ndef f():\n    return torch.ones(1)\n")
    monkeypatch.setattr(ddpify.api, "migrate_source",
                        lambda code, options=None: ddpify.api.Result(code + "# added\n", ()))
    assert sweep.check_file(str(library)).outcome == sweep.UNWANTED_CHANGE


@pytest.mark.parametrize("source, trains", [
    ("class Scaler:\n    def step(self, optimizer):\n        optimizer.step()\n", False),
    ("def closure(loss):\n    loss.backward()\n", False),
    ("for x in data:\n    loss(x).backward()\n", True),
    ("def main():\n    train()\n\n\ndef train():\n    optimizer.step()\n\n\n"
     "if __name__ == '__main__':\n    main()\n", True),
    ("class Trainer:\n    def fit(self):\n        self.opt.step()\n\n\nTrainer().fit()\n", True),
    ("import fire\n\n\ndef train():\n    optimizer.step()\n\n\nfire.Fire()\n", True),
])
def test_what_trains_when_run(source, trains):
    assert sweep.trains_when_run(source) is trains


def test_the_sweep_would_accept_every_fixture():
    """Each fixture that ddpify changes trains when run, by the sweep's own judgement."""
    changed = [case for case in all_cases()
               if case.expected.exists() and case.expected.read_text() != case.input.read_text()]
    assert changed
    assert [case.name for case in changed if not sweep.trains_when_run(case.input.read_text())
            and not _trains_through_helpers(case) and not _helper_of_unseen_callers(case)] == []


def _helper_of_unseen_callers(case) -> bool:
    """A training helper in a project's folder that no module imports (DDP918): migrated for
    callers ddpify cannot see, which the sweep, reading installed packages without a
    project, never is (test_a_library_module_without_a_project_comes_back_unchanged)."""
    return "DDP918" in case.expected_diagnostics.read_text()


def test_a_library_module_without_a_project_comes_back_unchanged():
    """The same training helper, read as the sweep reads a site-packages file (no project
    around it): left unchanged, DDP905."""
    [case] = [case for case in all_cases() if case.name == "training_helpers_no_caller_in_view"]
    result = migrate_source(case.input.read_text())
    assert result.code == case.input.read_text()
    assert [d.code for d in result.diagnostics] == ["DDP905"]


def _trains_through_helpers(case) -> bool:
    """A fixture whose training steps are in its own helper module (engine.train_one_epoch):
    the sweep reads one file, ddpify reads the project."""
    tree = ast.parse(case.input.read_text())
    names = FunctionEffects(tree)
    return any(case.project.trains(names.qualified(ast.unparse(node.func)))
               for node in ast.walk(tree) if isinstance(node, ast.Call))


def test_a_real_syntax_error_is_fine(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\nx = (\n")
    assert sweep.check_file(str(broken)).outcome == sweep.SYNTAX_ERROR


# -- the emitted code adds no per-step host synchronisation (benchmarks/bench_emitted.py) --

import bench_emitted  # noqa: E402


@pytest.mark.parametrize("case", [case for case in all_cases() if case.expected.exists()],
                         ids=lambda case: case.name)
def test_no_sync_added_to_training_steps(case):
    added = bench_emitted.added_syncs(case.input.read_text(), case.expected.read_text())
    assert not added, f"{case.name}: the migrated step loop gains {dict(added)}"


def test_added_sync_is_caught():
    before = ("for epoch in range(3):\n    for x in loader:\n        loss = f(x)\n"
              "        loss.backward()\n    print(loss.item())\n")
    after = ("for epoch in range(3):\n    for x in loader:\n        loss = f(x)\n"
             "        loss.backward()\n        dist.all_reduce(loss)\n        total += loss.item()\n"
             "    print(loss.item())\n")
    assert bench_emitted.added_syncs(before, after) == {"all_reduce": 1, "item": 1}
    assert not bench_emitted.added_syncs(before, before)
