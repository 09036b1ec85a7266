"""--twin and the pre-commit hooks, run for real with `pre-commit try-repo`."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import NO_TRAINING, guide_text, invoke, migrated, snapshot, write

ROOT = Path(__file__).resolve().parent.parent
HOOKS = ROOT / ".pre-commit-hooks.yaml"
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "ddpify tests", "GIT_AUTHOR_EMAIL": "tests@ddpify.invalid",
    "GIT_COMMITTER_NAME": "ddpify tests", "GIT_COMMITTER_EMAIL": "tests@ddpify.invalid",
}


# -- ddpify --twin -------------------------------------------------------------------------

@pytest.fixture
def project(tmp_path):
    write(tmp_path / "train.py", guide_text())
    write(tmp_path / "util.py", NO_TRAINING)
    return tmp_path


def test_twin_is_written_and_fails(project):
    result = invoke("--twin", project / "train.py", project / "util.py")
    assert result.exit_code == 1
    assert (project / "train_ddp.py").read_text() == migrated(guide_text())
    assert f"{project / 'train_ddp.py'}: written from {project / 'train.py'}" in result.stderr
    assert not (project / "util_ddp.py").exists()  # no training code, no twin
    assert (project / "train.py").read_text() == guide_text()


def test_fresh_twin_passes_untouched(project):
    invoke("--twin", project / "train.py")
    before = snapshot(project / "train_ddp.py")
    result = invoke("--twin", project / "train.py", project / "train_ddp.py")
    assert result.exit_code == 0, result.stderr
    assert snapshot(project / "train_ddp.py") == before


def test_twin_edited_by_hand_is_regenerated(project):
    write(project / "train_ddp.py", migrated(guide_text()) + "# edited by hand\n")
    result = invoke("--twin", project / "train_ddp.py")  # maps back to train.py
    assert result.exit_code == 1
    assert "updated from" in result.stderr
    assert (project / "train_ddp.py").read_text() == migrated(guide_text())


def test_twin_follows_its_source(project):
    invoke("--twin", project / "train.py")
    write(project / "train.py", guide_text().replace("range(3)", "range(5)"))
    assert invoke("--twin", project / "train.py").exit_code == 1
    assert "range(5)" in (project / "train_ddp.py").read_text()


def test_twin_without_source_is_left_alone(project):
    orphan = write(project / "helper_ddp.py", guide_text())
    before = snapshot(orphan)
    result = invoke("--twin", orphan)
    assert result.exit_code == 0
    assert snapshot(orphan) == before
    assert not (project / "helper_ddp_ddp.py").exists()


def test_twin_check_writes_nothing(project):
    twin = project / "train_ddp.py"
    assert invoke("--twin", "--check", project / "train.py").exit_code == 1
    assert not twin.exists()
    invoke("--twin", project / "train.py")
    assert invoke("--twin", "--check", project / "train.py").exit_code == 0
    write(twin, "stale\n")
    result = invoke("--twin", "--check", twin)
    assert result.exit_code == 1
    assert "stale" in result.stderr
    assert twin.read_text() == "stale\n"


def test_twin_of_a_directory(project):
    (project / "sub").mkdir()
    write(project / "sub" / "finetune.py", guide_text())
    assert invoke("--twin", project).exit_code == 1
    assert (project / "train_ddp.py").exists() and (project / "sub" / "finetune_ddp.py").exists()
    assert invoke("--twin", project).exit_code == 0  # twins found by walking map to their sources


def test_zero_files_is_not_an_error():
    assert invoke("--twin").exit_code == 0
    assert invoke("--check", "--quiet").exit_code == 0


# -- .pre-commit-hooks.yaml ----------------------------------------------------------------

def test_hook_definitions():
    yaml = pytest.importorskip("yaml")
    hooks = {hook["id"]: hook for hook in yaml.safe_load(HOOKS.read_text())}
    assert set(hooks) == {"ddpify-check", "ddpify-twin"}
    assert hooks["ddpify-check"]["entry"].split()[:2] == ["ddpify", "--check"]
    assert hooks["ddpify-twin"]["entry"].split()[:2] == ["ddpify", "--twin"]
    for hook in hooks.values():
        assert hook["language"] == "python"
        assert hook["types"] == ["python"]


def _git(*args, cwd):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env={**os.environ, **GIT_IDENTITY})


def _hook_repository(destination: Path, language: str) -> Path:
    """This checkout's package, committed in a repository of its own (try-repo clones it)."""
    for name in ("ddpify", "setup.cfg", "pyproject.toml", "README.md", ".pre-commit-hooks.yaml"):
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, destination / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif source.exists():
            shutil.copy(source, destination / name)
    hooks = destination / ".pre-commit-hooks.yaml"
    hooks.write_text(hooks.read_text().replace("language: python", f"language: {language}"))
    _git("init", "-q", cwd=destination)
    _git("add", ".", cwd=destination)
    _git("commit", "-q", "-m", "hooks under test", cwd=destination)
    return destination


def _pre_commit(*args, project: Path, home: Path):
    _git("add", ".", cwd=project)
    # `language: system` hooks run the ddpify installed beside this interpreter, activated
    # or not.
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    environment = {**os.environ, **GIT_IDENTITY, "PRE_COMMIT_HOME": str(home), "PATH": path}
    return subprocess.run([sys.executable, "-m", "pre_commit", *args], cwd=project,
                          capture_output=True, text=True, env=environment, timeout=600)


def _try_repo(hook_repository: Path, hook: str, project: Path, home: Path):
    return _pre_commit("try-repo", str(hook_repository), hook, "--all-files",
                       project=project, home=home)


def _git_project(root: Path) -> Path:
    write(root / "train.py", guide_text())
    write(root / "util.py", "def add(a, b):\n    return a + b\n")
    _git("init", "-q", cwd=root)
    return root


def _exercise_hooks(tmp_path: Path, language: str) -> None:
    pytest.importorskip("pre_commit")
    hooks = _hook_repository(_make(tmp_path / "hooks"), language)
    home = _make(tmp_path / "pre-commit-home")

    project = _git_project(_make(tmp_path / "project"))
    first = _try_repo(hooks, "ddpify-twin", project, home)
    assert first.returncode == 1, first.stdout + first.stderr
    assert (project / "train_ddp.py").read_text() == migrated(guide_text())
    assert not (project / "util_ddp.py").exists()
    second = _try_repo(hooks, "ddpify-twin", project, home)
    assert second.returncode == 0, second.stdout + second.stderr

    # The check hook: the source is not DDP-ready (its twin is).
    check = _try_repo(hooks, "ddpify-check", project, home)
    assert check.returncode == 1, check.stdout + check.stderr
    assert "train.py: not DDP-ready: ddpify would rewrite it (ddpify --diff train.py" in check.stdout
    (project / "train.py").unlink()
    _git("rm", "-q", "--cached", "train.py", cwd=project)
    ready = _try_repo(hooks, "ddpify-check", project, home)
    assert ready.returncode == 0, ready.stdout + ready.stderr


def _make(path: Path) -> Path:
    path.mkdir(parents=True)
    return path


@pytest.mark.slow
def test_hooks_as_published(tmp_path):
    """As users get them: pre-commit builds a virtual environment and pip-installs the hook
    repository with libcst and click from the package index (needs the index; ~100 s here)."""
    _exercise_hooks(tmp_path, "python")


# -- the README's snippet, as a newcomer pastes it (issue 18, item 7) -----------------------

README = (ROOT / "README.md").read_text()


def _readme_section(title: str) -> str:
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end if end != -1 else None]


def _readme_config(hook_repository: Path) -> str:
    """The README's .pre-commit-config.yaml with its two blanks filled in as it says:
    the repository, and its newest commit from `git -C <clone> rev-parse HEAD`."""
    section = _readme_section("pre-commit")
    assert "`git -C path/to/ddpify rev-parse HEAD`" in section
    snippet = re.search(r"```yaml\n(.*?)```", section, re.DOTALL).group(1)
    newest = subprocess.run(["git", "-C", str(hook_repository), "rev-parse", "HEAD"],
                            capture_output=True, text=True, check=True).stdout.strip()
    return (snippet.replace("<ddpify repository URL>", str(hook_repository))
            .replace("<commit>", newest))


@pytest.mark.slow  # a process-level shell test of several seconds; CI runs it
def test_readme_snippet_from_a_fresh_clone(tmp_path):
    """Offline: the hooks run this install (`language: system`); test_hooks_as_published
    installs them as users get them, through `pre-commit try-repo`."""
    pytest.importorskip("pre_commit")
    # A fresh clone: this checkout's files in a new repository, without a single tag.
    hooks = _hook_repository(_make(tmp_path / "hooks"), "system")
    home = _make(tmp_path / "pre-commit-home")
    project = _git_project(_make(tmp_path / "project"))
    write(_make(project / "ddp") / "run.py", migrated(guide_text()))
    write(project / ".pre-commit-config.yaml", _readme_config(hooks))

    first = _pre_commit("run", "--all-files", project=project, home=home)
    assert first.returncode == 1, first.stdout + first.stderr  # the twin was written
    assert (project / "train_ddp.py").read_text() == migrated(guide_text())
    assert not (project / "util_ddp.py").exists()
    assert re.search(r"ddpify check\.+Passed", first.stdout), first.stdout

    write(project / "ddp" / "new.py", guide_text())  # a single-GPU script where DDP ones live
    second = _pre_commit("run", "--all-files", project=project, home=home)
    assert re.search(r"ddpify twin\.+Passed", second.stdout), second.stdout  # the twin is fresh
    assert second.returncode == 1
    assert "ddp/new.py: not DDP-ready: ddpify would rewrite it (ddpify --diff ddp/new.py" in second.stdout

