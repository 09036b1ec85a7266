"""Whole repositories: directory walking, excludes, [tool.ddpify], workers, progress, summary."""
import io
import json
import os

import pytest
from cli_support import NO_TRAINING, guide_text, invoke, migrated, write
from fixture_cases import FIXTURES

from ddpify import config
from ddpify.progress import Progress
from ddpify.walk import GitIgnore, expand, matches_any


@pytest.fixture
def repo(tmp_path):
    """A project with training scripts among things that are never walked."""
    (tmp_path / ".git").mkdir()
    write(tmp_path / ".gitignore", "# generated\n/scratch/\n*_old.py\nnotes/\n!keep_old.py\n")
    layout = {
        "train.py": guide_text(),
        "src/model/train_net.py": guide_text(),
        "src/util.py": "def add(a, b):\n    return a + b\n",
        "src/tensors.py": NO_TRAINING,
        "src/legacy_old.py": guide_text(),
        "scratch/try.py": guide_text(),
        "notes/train.py": guide_text(),
        "build/lib/train.py": guide_text(),
        "dist/train.py": guide_text(),
        ".git/hooks/x.py": guide_text(),
        "__pycache__/train.py": guide_text(),
        ".venv/lib/train.py": guide_text(),
        "myenv/lib/train.py": guide_text(),
        "myenv/pyvenv.cfg": "home = /usr/bin\n",
        "pkg.egg-info/train.py": guide_text(),
        "data/train.txt": guide_text(),
    }
    for name, text in layout.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        write(path, text)
    return tmp_path


def _relative(entries, root):
    return [os.path.relpath(entry.path, root) for entry in entries]


def test_walk_skips_what_is_never_project_code(repo):
    assert _relative(expand([str(repo)]), repo) == [
        "train.py", "src/tensors.py", "src/util.py", "src/model/train_net.py",
    ]


def test_walk_with_excludes(repo):
    entries = expand([str(repo)], ["model", "util.py"])
    assert _relative(entries, repo) == ["train.py", "src/tensors.py"]


def test_explicit_files_keep_their_order_and_are_not_repeated(repo):
    entries = expand([str(repo / "src" / "util.py"), str(repo / "train.py"), str(repo / "src"),
                      str(repo / "train.py")])
    assert _relative(entries, repo) == ["src/util.py", "train.py", "src/tensors.py",
                                        "src/model/train_net.py"]
    assert [entry.explicit for entry in entries] == [True, True, False, False]


def test_excludes_apply_to_explicit_files():
    assert expand(["a/legacy/train.py", "b.py"], ["legacy/*"]) == expand(["b.py"])


def test_glob_matching():
    assert matches_any("src/legacy/old.py", ["legacy/*"])
    assert matches_any("src/legacy/old.py", ["*.py"])
    assert matches_any("./src/legacy", ["legacy/"])
    assert not matches_any("src/legacy_models/x.py", ["legacy"])


def test_gitignore_patterns(tmp_path):
    ignored = GitIgnore.read(str(write(tmp_path / ".gitignore",
                                       "*.tmp.py\n/top.py\ndeep/**/gen.py\nout/\n").parent))
    root = str(tmp_path)
    assert ignored.matches(str(tmp_path / "a" / "x.tmp.py"), root, is_directory=False)
    assert ignored.matches(str(tmp_path / "top.py"), root, is_directory=False)
    assert not ignored.matches(str(tmp_path / "a" / "top.py"), root, is_directory=False)
    assert ignored.matches(str(tmp_path / "deep" / "a" / "b" / "gen.py"), root, is_directory=False)
    assert ignored.matches(str(tmp_path / "a" / "out"), root, is_directory=True)
    assert not ignored.matches(str(tmp_path / "a" / "out"), root, is_directory=False)


def test_check_a_directory(repo):
    result = invoke("--check", repo)
    assert result.exit_code == 1
    assert f"{repo / 'train.py'}: not DDP-ready" in result.stderr
    assert f"{repo / 'src/model/train_net.py'}: not DDP-ready" in result.stderr
    # Walked files that never mention torch are skipped silently; util.py is never parsed.
    assert "util.py" not in result.stderr
    assert result.stderr.splitlines()[-1] == "4 files: 2 to migrate, 1 unchanged, 1 skipped, 0 failed"


def test_files_without_torch_are_not_parsed(repo):
    write(repo / "src" / "util.py", "this is not ( python\n")
    assert invoke("--check", repo / "src").exit_code == 1  # only train_net.py is pending


def test_in_place_on_a_directory(repo):
    result = invoke("-i", repo / "src")
    assert result.exit_code == 0
    assert (repo / "src/model/train_net.py").read_text() == migrated(guide_text())
    assert (repo / "src/legacy_old.py").read_text() == guide_text()  # .gitignore'd
    assert result.stderr.splitlines()[-1] == "3 files: 1 migrated, 1 unchanged, 1 skipped, 0 failed"


@pytest.mark.slow  # a process-level shell test of several seconds; CI runs it
def test_workers_keep_input_order(repo):
    (repo / "more").mkdir()
    for index in range(6):
        write(repo / "more" / f"train_{index}.py", guide_text())
    write(repo / "more" / "broken.py", "import torch\nx = (\n")
    sequential = invoke("--format", "json", "--check", repo)
    parallel = invoke("--format", "json", "--check", "-j", "3", repo)
    assert parallel.exit_code == sequential.exit_code == 2
    assert json.loads(parallel.stdout) == json.loads(sequential.stdout)
    assert parallel.stderr == sequential.stderr


def test_workers_zero_means_one_per_cpu(repo):
    assert invoke("--check", "-j", "0", repo).exit_code == 1


def test_no_summary_for_one_file(repo):
    result = invoke("--check", repo / "train.py")
    assert "files:" not in result.stderr


# -- [tool.ddpify] -------------------------------------------------------------------------

def _pyproject(root, body):
    return write(root / "pyproject.toml", "[project]\nname = 'x'\n\n[tool.ddpify]\n" + body)


def test_config_is_found_walking_up(repo):
    path = _pyproject(repo, 'ignore = ["DDP206"]\n')
    assert config.find(str(repo / "src" / "model" / "train_net.py")) == str(path)
    result = invoke("--check", repo / "src" / "model" / "train_net.py")
    assert "DDP206" not in result.stderr


def test_config_does_not_cross_the_repository_root(repo):
    _pyproject(repo.parent, 'ignore = ["DDP206"]\n')
    try:
        assert config.find(str(repo / "train.py")) is None
    finally:
        (repo.parent / "pyproject.toml").unlink()


def test_pyproject_without_table_is_passed_over(repo):
    write(repo / "src" / "pyproject.toml", "[project]\nname = 'inner'\n")
    outer = _pyproject(repo, "select = ['DDP3']\n")
    assert config.find(str(repo / "src" / "util.py")) == str(outer)


def test_command_line_wins(repo):
    _pyproject(repo, 'ignore = ["DDP206"]\nkeep-global-batch = true\n')
    script = repo / "train.py"
    assert invoke(script).stdout == migrated(guide_text(), keep_global_batch=True)
    assert invoke("--no-keep-global-batch", script).stdout == migrated(guide_text())
    # --keep-global-batch stops the batch growing, so DDP206 needs it off to show.
    assert "DDP206" in invoke("--ignore", "DDP9", "--no-keep-global-batch", script).stderr


def test_config_exclude_is_added_to_the_command_line(repo):
    _pyproject(repo, 'exclude = ["model/"]\n')
    result = invoke("--check", "--exclude", "tensors.py", repo)
    assert result.stderr.splitlines()[-1] == "2 files: 1 to migrate, 0 unchanged, 1 skipped, 0 failed"


@pytest.mark.parametrize("body, words", [
    ("colour = true\n", "unknown key 'colour'"),
    ("sync-batchnorm = 'yes'\n", "sync-batchnorm must be true or false"),
    ("select = 3\n", "select must be a list of strings"),
    ("select = [\n", "pyproject.toml"),
])
def test_bad_config_is_a_usage_error(repo, body, words):
    _pyproject(repo, body)
    result = invoke("--check", repo / "train.py")
    assert result.exit_code == 2
    assert words in result.stderr


def test_config_without_a_toml_reader(repo, monkeypatch):
    _pyproject(repo, 'ignore = ["DDP206"]\n')
    monkeypatch.setattr(config, "_toml_reader", lambda: None)
    result = invoke("--check", repo / "train.py")
    assert result.exit_code == 1
    assert "[tool.ddpify] ignored" in result.stderr
    assert "DDP206" in result.stderr


def test_config_from_stdin_uses_the_working_directory(repo, monkeypatch):
    _pyproject(repo, 'ignore = ["DDP206"]\n')
    monkeypatch.chdir(repo)
    result = invoke("-", input=guide_text().encode())
    assert "DDP206" not in result.stderr


# -- progress ------------------------------------------------------------------------------

class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_is_silent_off_a_terminal():
    stream = io.StringIO()
    progress = Progress(100, stream, clock=iter(range(0, 1000)).__next__)
    for index in range(100):
        progress.advance(f"file_{index}.py")
    progress.clear()
    assert stream.getvalue() == ""


def test_progress_on_a_terminal():
    stream = _Terminal()
    ticks = iter(range(0, 1000))
    progress = Progress(10, stream, clock=lambda: next(ticks))
    for index in range(10):
        progress.advance(f"file_{index}.py")
    assert "10/10 file_9.py" in stream.getvalue()
    assert "[" + "#" * 30 + "]" in stream.getvalue()
    progress.clear()
    assert stream.getvalue().endswith("\r\x1b[K")


def test_progress_waits_before_drawing():
    stream = _Terminal()
    progress = Progress(10, stream, clock=lambda: 0.0)
    for _ in range(10):
        progress.advance("x.py")
    assert stream.getvalue() == ""  # a short run never flickers a bar


def test_walked_files_with_nothing_to_do_say_nothing(repo):
    """A note per untouched file would bury a repository's real findings; named files keep it."""
    walked = invoke("--check", repo / "src")
    assert "DDP901" not in walked.stderr
    assert walked.stderr.splitlines()[-1].endswith("0 failed")
    assert "DDP901" in invoke("--check", repo / "src" / "tensors.py").stderr


def test_shard_eval_from_pyproject(repo):
    text = (FIXTURES / "evaluation" / "eval_sum_and_count_accuracy" / "input.py").read_text()
    script = write(repo / "eval_train.py", text)
    _pyproject(repo, "shard-eval = false\n")
    assert invoke(script).stdout == migrated(text, shard_evaluation=False)
    assert invoke("--shard-eval", script).stdout == migrated(text)
