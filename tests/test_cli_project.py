"""A training project on the command line (issue 20): an entry script brings the project's
modules it imports along for -i, --diff, --check, -o OUT_DIR/ and the report formats.

Each file's expected result is what its own migration says (`migrate_source` with the
project view around it), never "only the entry changes": the core may come to change helper
modules too, and these tests must stay right when it does.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import invoke, snapshot
from script_runs import GLOO_ABORT_RETRIES, GLOO_TEARDOWN_ABORT

import ddpify.api
from ddpify import project
from ddpify.options import Options
from ddpify.project_files import files_of

# A training script that also offers a helper: the entry imports the helper, and ddpify
# migrates both files, each for its own training loop.
PRETRAIN = '''\
import torch
from torch.utils.data import DataLoader, TensorDataset


def make_dataset():
    torch.manual_seed(0)
    return TensorDataset(torch.randn(32, 4), torch.randn(32, 1))


def main():
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(make_dataset(), batch_size=4, shuffle=True)
    for epoch in range(2):
        for x, y in loader:
            loss = ((model(x) - y) ** 2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print("pretrain", epoch, loss.item())


if __name__ == "__main__":
    main()
'''

TRAIN = '''\
import torch
from torch.utils.data import DataLoader

from common.paths import run_folder
from pretrain import make_dataset


def main():
    torch.manual_seed(1)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(make_dataset(), batch_size=4, shuffle=True)
    for epoch in range(2):
        for x, y in loader:
            loss = ((model(x) - y) ** 2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print("train", epoch, loss.item())
    print("runs in", run_folder())


if __name__ == "__main__":
    main()
'''

FILES = {
    "train.py": TRAIN,
    "pretrain.py": PRETRAIN,
    "common/__init__.py": "",
    "common/paths.py": "import os\n\n\ndef run_folder():\n    return os.path.join('runs', 'latest')\n",
    "finetune.py": PRETRAIN.replace("pretrain", "finetune"),  # not imported by train.py
    "config.yaml": "lr: 0.1\n",
    "data/samples.csv": "1,2,3\n",
    ".git/HEAD": "ref: refs/heads/main\n",
    "__pycache__/train.cpython-311.pyc": "cached",
    ".venv/pyvenv.cfg": "home = /usr/bin\n",
}


@pytest.fixture
def tree(tmp_path) -> Path:
    root = tmp_path / "proj"
    for name, text in FILES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def own_migration(path: Path):
    """What migrating this one file says, with the project view around it."""
    text = path.read_text()
    return ddpify.api.migrate_source(text, Options(), project.read(str(path), text))


def expected_changes(entry: Path) -> dict[Path, str]:
    """Each file of the entry's project that its own migration changes, and to what."""
    changed = {}
    for path in files_of(entry):
        text = path.read_text()
        code = own_migration(path).code
        if code != text:
            changed[path] = code
    return changed


def state(root: Path) -> dict[str, tuple]:
    return {str(path.relative_to(root)): snapshot(path) for path in sorted(root.rglob("*")) if path.is_file()}


def test_the_tree_has_helper_modules_that_change_and_some_that_do_not(tree):
    changed = expected_changes(tree / "train.py")
    assert {tree.resolve() / "train.py", tree.resolve() / "pretrain.py"} <= set(changed)
    assert tree.resolve() / "common" / "__init__.py" not in changed


def test_in_place_rewrites_every_module_that_changes(tree, monkeypatch):
    monkeypatch.chdir(tree)
    expected = expected_changes(tree / "train.py")
    untouched = {name: snapshot(tree / name) for name in ("finetune.py", "config.yaml")}
    result = invoke("-i", "train.py")
    assert result.exit_code == 0, result.stderr
    for path, code in expected.items():
        assert path.read_text() == code, path
        assert f"{os.path.relpath(path)}: migrated in place" in result.stderr
    assert {name: snapshot(tree / name) for name in untouched} == untouched
    again = invoke("--check", "train.py")
    assert again.exit_code == 0, again.stderr


def test_diff_is_one_patch_that_git_applies(tree, monkeypatch):
    repository = tree.parent
    shutil.rmtree(tree / ".git")
    subprocess.run(["git", "init", "-q", str(repository)], check=True)
    monkeypatch.chdir(repository)
    expected = expected_changes(tree / "train.py")
    before = state(tree)
    result = invoke("--diff", "proj/train.py")
    assert result.exit_code == 1, result.stderr
    headers = [line for line in result.stdout.splitlines() if line.startswith("+++ ")]
    assert sorted(headers) == sorted(f"+++ b/{os.path.relpath(path, repository.resolve())}" for path in expected)
    assert state(tree) == before
    patch = repository / "project.patch"
    patch.write_text(result.stdout)
    subprocess.run(["git", "apply", "--check", str(patch)], check=True)
    subprocess.run(["git", "apply", str(patch)], check=True)
    for path, code in expected.items():
        assert path.read_text() == code


def test_diff_of_a_folder_from_inside_it(tree, monkeypatch):
    """`cd project && ddpify --diff .` warned "no Python file to check under ." and then
    checked the files: walked paths (./train.py) were compared with "./"."""
    monkeypatch.chdir(tree)
    result = invoke("--diff", ".")
    assert result.exit_code == 1
    assert "no Python file" not in result.stderr
    assert "+++ b/train.py" in result.stdout and "+++ b/finetune.py" in result.stdout
    patch = tree / "all.patch"
    patch.write_text(result.stdout)
    applied = subprocess.run(["patch", "-p1", "--dry-run", "-s", "-i", str(patch)], cwd=tree,
                             capture_output=True, text=True)
    assert applied.returncode == 0, applied.stderr


def test_check_fails_while_any_module_of_the_project_needs_migration(tree, monkeypatch):
    monkeypatch.chdir(tree)
    assert invoke("-i", "train.py").exit_code == 0
    ready = invoke("--check", "train.py")
    assert ready.exit_code == 0, ready.stderr
    (tree / "pretrain.py").write_text(PRETRAIN)
    stale = invoke("--check", "--quiet", "train.py")
    assert stale.exit_code == 1
    assert stale.stderr.splitlines() == [
        "pretrain.py: not DDP-ready: ddpify would rewrite it (ddpify --diff pretrain.py shows how)"]


def test_output_directory_is_a_migrated_copy_of_the_tree(tree, tmp_path):
    out = tmp_path / "out"
    before = state(tree)
    expected = expected_changes(tree / "train.py")
    result = invoke(tree / "train.py", "-o", f"{out}/")
    assert result.exit_code == 0, result.stderr
    assert state(tree) == before
    assert sorted(str(path.relative_to(out)) for path in out.rglob("*") if path.is_file()) == [
        "common/__init__.py", "common/paths.py", "config.yaml", "data/samples.csv", "finetune.py",
        "pretrain.py", "train.py"]
    for name in ("common/__init__.py", "common/paths.py", "config.yaml", "data/samples.csv", "finetune.py"):
        assert (out / name).read_bytes() == (tree / name).read_bytes(), name
    for path, code in expected.items():
        assert (out / path.relative_to(tree.resolve())).read_text() == code
    assert f"{out}/: a migrated copy of {tree}" in result.stderr


# The entry distributes itself: its helper modules are part of its own design.
DISTRIBUTED_TRAIN = TRAIN.replace("def main():\n", """def main():
    torch.distributed.init_process_group("gloo")
""", 1)


@pytest.mark.parametrize("mode", [("--diff",), ("--check",), ("-i",), ("-o", "out/")])
def test_an_entry_already_distributed_leaves_its_helper_modules_alone(tree, monkeypatch, mode):
    (tree / "train.py").write_text(DISTRIBUTED_TRAIN)
    assert own_migration(tree / "pretrain.py").code != PRETRAIN  # on its own it would change
    monkeypatch.chdir(tree.parent)
    before = state(tree)
    result = invoke(*[arg if arg != "out/" else str(tree.parent / "out") + "/" for arg in mode], "proj/train.py")
    assert result.exit_code == 0, result.stderr
    assert "proj/train.py:9:5: info: DDP900 already distributed: left unchanged" in result.stderr
    assert "pretrain.py" not in result.stdout + result.stderr
    assert state(tree) == before
    if mode[0] == "-o":
        assert (tree.parent / "out" / "pretrain.py").read_text() == PRETRAIN


def test_output_directory_of_a_folder_migrates_each_script(tree, tmp_path):
    out = tmp_path / "copy"
    out.mkdir()
    result = invoke(tree, "-o", out)
    assert result.exit_code == 0, result.stderr
    for name in ("train.py", "pretrain.py", "finetune.py"):
        assert (out / name).read_text() == own_migration(tree / name).code
    assert (out / "data" / "samples.csv").is_file() and not (out / ".git").exists()


@pytest.mark.parametrize("where", ["proj", "proj/out/", "proj/common/", "."])
def test_output_directory_overlapping_the_input_is_refused(tree, where):
    before = state(tree.parent)
    result = invoke(tree / "train.py", "-o", f"{tree.parent / where}/")
    assert result.exit_code == 2
    assert result.stderr.startswith("ddpify: error: -o ")
    assert f"give a directory outside it (such as {tree.parent / 'proj_ddp'}/)" in result.stderr
    assert state(tree.parent) == before


def test_output_directory_of_a_missing_script(tmp_path):
    result = invoke(tmp_path / "nowhere" / "train.py", "-o", f"{tmp_path / 'out'}/")
    assert result.exit_code == 2 and "no such file or directory" in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_script_that_fails_to_migrate_leaves_the_output_directory_unwritten(tree, tmp_path):
    (tree / "pretrain.py").write_text(PRETRAIN + "\ndef broken(:\n")
    result = invoke(tree / "train.py", "-o", f"{tmp_path / 'out'}/")
    assert result.exit_code == 2
    assert "pretrain.py" in result.stderr and "syntax error" in result.stderr
    assert "nothing written" in result.stderr
    assert not (tmp_path / "out").exists()


def test_excluded_modules_are_not_migrated_but_still_copied(tree, tmp_path, monkeypatch):
    monkeypatch.chdir(tree)
    before = snapshot(tree / "pretrain.py")
    assert invoke("-i", "train.py", "--exclude", "pretrain.py").exit_code == 0
    assert snapshot(tree / "pretrain.py") == before
    assert invoke("--check", "-q", "train.py", "--exclude", "pretrain.py").exit_code == 0
    out = tmp_path / "out"
    assert invoke("train.py", "--exclude", "pretrain.py", "-o", f"{out}/").exit_code == 0
    assert (out / "pretrain.py").read_text() == PRETRAIN


@pytest.mark.parametrize("args", [("--check", "-o", "{out}/", "train.py"), ("-", "-o", "{out}/"),
                                  ("-o", "{out}/", "train.py", "pretrain.py"), ("-i", "-o", "{out}/", "train.py")])
def test_output_directory_usage_errors(tree, tmp_path, monkeypatch, args):
    monkeypatch.chdir(tree)
    result = invoke(*(arg.format(out=tmp_path / "out") for arg in args), input="")
    assert result.exit_code == 2 and result.stderr.startswith("ddpify: error:")
    assert not (tmp_path / "out").exists()


def test_output_file_refuses_a_project_that_needs_more_than_one_file_changed(tree, tmp_path):
    out = tmp_path / "train_ddp.py"
    result = invoke(tree / "train.py", "-o", out)
    assert result.exit_code == 2
    assert "-o OUT_DIR/" in result.stderr and "-i" in result.stderr
    assert str(tree / "pretrain.py") in result.stderr
    assert not out.exists()
    assert invoke(tree / "train.py").exit_code == 2  # stdout holds one file too


def test_output_file_when_only_the_entry_changes(tree, tmp_path):
    (tree / "pretrain.py").write_text(
        "import torch\n\n\ndef make_dataset():\n"
        "    return torch.utils.data.TensorDataset(torch.randn(8, 4), torch.randn(8, 1))\n")
    out = tmp_path / "train_ddp.py"
    result = invoke(tree / "train.py", "-o", out)
    assert result.exit_code == own_migration(tree / "train.py").needs_a_person, result.stderr
    assert out.read_text() == own_migration(tree / "train.py").code


def test_each_diagnostic_names_its_own_file(tree, monkeypatch, needs_a_person):
    """The helper module's warning (a custom sampler, DDP207) is reported on the helper."""
    weighted = PRETRAIN.replace("batch_size=4, shuffle=True",
                                "batch_size=4, sampler=WeightedRandomSampler(torch.ones(32), 32)")
    (tree / "pretrain.py").write_text(weighted.replace("TensorDataset\n", "TensorDataset, WeightedRandomSampler\n"))
    monkeypatch.chdir(tree)
    document = json.loads(invoke("--check", "--format", "json", "train.py").stdout)
    codes = {entry["path"]: [d["code"] for d in entry["diagnostics"]] for entry in document["files"]}
    assert "DDP207" in codes["pretrain.py"] and "DDP207" not in codes["train.py"]
    for entry in document["files"]:
        own = own_migration(tree / entry["path"])
        assert sorted(d["code"] for d in entry["diagnostics"]) == sorted(
            d.code for d in own.diagnostics + own.unused_suppressions if d.code not in ("DDP900", "DDP901")
            or entry["path"] == "train.py")
    github = invoke("--diff", "--format", "github", "train.py")
    annotations = [line for line in github.stdout.splitlines() if line.startswith("::")]
    assert any(line.startswith("::warning file=pretrain.py,") and "DDP207" in line for line in annotations)
    assert not any(line.startswith("::warning file=train.py,") and "DDP207" in line for line in annotations)


def test_imports_ddpify_cannot_follow_are_reported_with_their_line(tree, monkeypatch):
    (tree / "train.py").write_text("import importlib\n" + TRAIN.replace(
        "def main():", "plugin = importlib.import_module('plugins.' + 'extra')\n\n\ndef main():"))
    monkeypatch.chdir(tree)
    result = invoke("--check", "-q", "train.py")
    assert result.exit_code == 1
    assert "train.py:9:10: warning: DDP909 an import ddpify cannot follow" in result.stderr


def test_precommit_passes_changed_files_each_checked_once(tree, monkeypatch):
    """The hook passes the changed files: a helper module alone is checked as itself, and
    a file named twice (given, and imported by another) is reported once."""
    monkeypatch.chdir(tree)
    alone = invoke("--check", "--quiet", "common/paths.py")
    assert alone.exit_code == 0 and alone.stderr == ""
    both = invoke("--check", "--quiet", "pretrain.py", "train.py")
    assert both.exit_code == 1
    assert both.stderr.count("pretrain.py: not DDP-ready") == 1
    assert both.stderr.count("train.py: not DDP-ready") == 2  # train.py and pretrain.py


def test_workers_give_the_same_patch(tree, monkeypatch):
    monkeypatch.chdir(tree)
    assert invoke("--diff", "-j", "2", "train.py").stdout == invoke("--diff", "train.py").stdout


@pytest.mark.slow
def test_torchrun_runs_the_migrated_copy(tree, tmp_path):
    out = tmp_path / "out"
    assert invoke(tree / "train.py", "-o", f"{out}/").exit_code == 0
    env = {key: value for key, value in os.environ.items() if key not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "train.py"]
    run = subprocess.run(command, cwd=out, env=env, capture_output=True, text=True, timeout=240)
    for _ in range(GLOO_ABORT_RETRIES):  # Gloo's abort at exit, not the script's (pytorch#179291)
        if run.returncode == 0 or GLOO_TEARDOWN_ABORT not in run.stderr:
            break
        run = subprocess.run(command, cwd=out, env=env, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    printed = [line for line in run.stdout.splitlines() if line.startswith("train")]
    assert [line.split()[:2] for line in printed] == [["train", "0"], ["train", "1"]]  # rank 0 alone
    single = subprocess.run([sys.executable, "train.py"], cwd=tree, env=env, capture_output=True, text=True,
                            timeout=240)
    migrated = subprocess.run([sys.executable, "train.py"], cwd=out, env=env, capture_output=True, text=True,
                              timeout=240)
    assert migrated.stdout == single.stdout


ROOT = Path(__file__).resolve().parent.parent


def test_the_readme_describes_projects():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("\n## Projects\n"):readme.index("\n## Verify a migration")]
    for form in ("-o OUT_DIR/", "--diff", "--check", "-i", "verify", "git apply", "Still open", "evaluation_share"):
        assert form in section, form


def test_the_readme_example_is_what_ddpify_prints(tmp_path, monkeypatch):
    readme = (ROOT / "README.md").read_text()
    command = "$ ddpify tests/data/verify_project/train.py -o /tmp/regressor_ddp/\n"
    shown = readme[readme.index(command) + len(command):].split("$ ", 1)[0]
    monkeypatch.chdir(ROOT)
    result = invoke("tests/data/verify_project/train.py", "-o", f"{tmp_path}/")
    assert result.exit_code == 0
    assert result.stderr.replace(f"{tmp_path}/", "/tmp/regressor_ddp/") == shown


# A helper module that prints and writes for the entry: migrated in the same run, it guards
# its own output, and the call in the entry stays as it was (one guard, not two).
LOGGING_TRAIN = '''\
import torch
from torch.utils.data import DataLoader, TensorDataset

import report


def main():
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=4)
    for epoch in range(2):
        for x, y in loader:
            loss = ((model(x) - y) ** 2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        report.log(f"epoch {epoch}: {loss.item():.4f}")
        report.save_curve("curve.csv", epoch, loss.item())


if __name__ == "__main__":
    main()
'''
REPORT = '''\
def log(message):
    print(message, flush=True)


def save_curve(path, epoch, loss):
    with open(path, "a") as f:
        f.write(f"{epoch},{loss}\\n")
'''


@pytest.mark.parametrize("how", [("-i",), ("-o", "{out}/")])
def test_a_helper_migrated_in_the_same_run_guards_its_output_and_its_calls_stay(tmp_path, monkeypatch, how):
    root = tmp_path / "proj"
    root.mkdir()
    (root / "train.py").write_text(LOGGING_TRAIN)
    (root / "report.py").write_text(REPORT)
    monkeypatch.chdir(root)
    out = tmp_path / "out"
    result = invoke(*(arg.format(out=out) for arg in how), "train.py")
    assert result.exit_code == 0, result.stderr
    migrated = out if "-o" in how else root
    train, helper = (migrated / "train.py").read_text(), (migrated / "report.py").read_text()
    assert helper.count("if is_main_process():") == 2
    assert "        report.log(f\"epoch" in train and "is_main" not in train
    assert "DDP30" not in "".join(line for line in result.stderr.splitlines(True) if line.startswith("train.py"))
    if "-i" in how:
        assert invoke("--check", "train.py").exit_code == 0  # and the migrated pair stays as it is


def test_a_helper_left_out_of_the_run_is_guarded_where_it_is_called(tmp_path, monkeypatch):
    root = tmp_path / "proj"
    root.mkdir()
    (root / "train.py").write_text(LOGGING_TRAIN)
    (root / "report.py").write_text(REPORT)
    monkeypatch.chdir(root)
    result = invoke("-i", "train.py", "--exclude", "report.py")
    assert result.exit_code == 0, result.stderr
    assert (root / "report.py").read_text() == REPORT
    assert "        if is_main:\n            report.log(" in (root / "train.py").read_text()
