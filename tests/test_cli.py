"""The command line, option by option and exit code by exit code (DESIGN §6)."""
import os
import subprocess
import sys

import pytest
from cli_support import (
    NEEDS_A_PERSON,
    NO_TRAINING,
    guide_text,
    invoke,
    migrated,
    snapshot,
    write,
)
from fixture_cases import FIXTURES

from ddpify.rules.registry import RULES


@pytest.fixture
def script(tmp_path):
    return write(tmp_path / "train.py", guide_text())


# -- where the result goes -----------------------------------------------------------------

def test_output_file(script, tmp_path):
    out = tmp_path / "train_ddp.py"
    result = invoke(script, "-o", out)
    assert result.exit_code == 0, result.stderr
    assert out.read_text() == migrated(guide_text())
    assert result.stdout == ""
    assert "DDP206" in result.stderr  # a note, shown; edits are not
    assert "DDP101" not in result.stderr


def test_stdout(script):
    result = invoke(script)
    assert result.exit_code == 0
    assert result.stdout == migrated(guide_text())


def test_stdin_to_stdout():
    result = invoke("-", input=guide_text().encode())
    assert result.exit_code == 0
    assert result.stdout == migrated(guide_text())
    assert "<stdin>:" in result.stderr


def test_stdin_to_output_file(tmp_path):
    out = tmp_path / "out.py"
    result = invoke("-", "-o", out, input=guide_text().encode())
    assert result.exit_code == 0
    assert out.read_text() == migrated(guide_text())


def test_in_place(script):
    result = invoke("-i", script)
    assert result.exit_code == 0
    assert script.read_text() == migrated(guide_text())
    assert "migrated in place" in result.stderr
    before = snapshot(script)
    again = invoke("-i", script)
    assert again.exit_code == 0
    assert "DDP900" in again.stderr
    assert snapshot(script) == before


def test_in_place_keeps_permissions(script):
    os.chmod(script, 0o751)
    invoke("-i", script)
    assert os.stat(script).st_mode & 0o777 == 0o751


def test_verbose_lists_edits(script):
    result = invoke("-v", script, "-o", str(script) + ".out")
    assert "DDP101 model wrapped in DistributedDataParallel" in result.stderr


# -- --diff and --check --------------------------------------------------------------------

def test_diff(script):
    before = snapshot(script)
    result = invoke("--diff", script)
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[0] == f"--- a/{script}"
    assert lines[1] == f"+++ b/{script}"
    assert any(line.startswith("@@ ") for line in lines)
    assert any(line.startswith("+") and "DistributedDataParallel" in line for line in lines)
    assert snapshot(script) == before


def test_diff_applies_with_patch(script, tmp_path):
    diff = invoke("--diff", script).stdout
    patched = subprocess.run(["patch", "-p1", "--dry-run", "-s"], input=diff, text=True,
                             cwd="/", capture_output=True)
    if patched.returncode == 127:
        pytest.skip("no patch tool")
    assert patched.returncode == 0, patched.stderr


def test_diff_of_ready_file_is_empty(tmp_path):
    ready = write(tmp_path / "ready.py", migrated(guide_text()))
    result = invoke("--diff", ready)
    assert result.exit_code == 0
    assert result.stdout == ""


def test_check_not_ready(script):
    before = snapshot(script)
    result = invoke("--check", script)
    assert result.exit_code == 1
    assert f"{script}: not DDP-ready" in result.stderr
    assert result.stdout == ""
    assert snapshot(script) == before


def test_check_ready(tmp_path):
    ready = write(tmp_path / "ready.py", migrated(guide_text()))
    result = invoke("--check", ready)
    assert result.exit_code == 0
    assert "DDP900" in result.stderr


def test_check_needs_a_person(tmp_path, needs_a_person):
    script = write(tmp_path / "custom_sampler.py", NEEDS_A_PERSON)
    result = invoke("--check", script)
    assert result.exit_code == 1
    assert "DDP207" in result.stderr


def test_check_twin_missing(script, tmp_path):
    twin = tmp_path / "train_ddp.py"
    result = invoke("--check", script, "-o", twin)
    assert result.exit_code == 1
    assert f"{twin}: missing" in result.stderr
    assert not twin.exists()


def test_check_twin_stale(script, tmp_path):
    twin = write(tmp_path / "train_ddp.py", migrated(guide_text()) + "# edited by hand\n")
    before = snapshot(twin)
    result = invoke("--check", script, "-o", twin)
    assert result.exit_code == 1
    assert f"{twin}: stale" in result.stderr
    assert snapshot(twin) == before


def test_check_twin_fresh(script, tmp_path):
    twin = write(tmp_path / "train_ddp.py", migrated(guide_text()))
    result = invoke("--check", script, "-o", twin)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""


def test_several_paths(script, tmp_path):
    ready = write(tmp_path / "ready.py", migrated(guide_text()))
    result = invoke("--check", script, ready)
    assert result.exit_code == 1
    assert "train.py: not DDP-ready" in result.stderr
    assert "ready.py: not DDP-ready" not in result.stderr
    assert "2 files: 1 to migrate, 1 unchanged, 0 skipped, 0 failed" in result.stderr


def test_exit_code_is_the_worst(script, tmp_path):
    missing = tmp_path / "missing.py"
    result = invoke("--check", script, missing)
    assert result.exit_code == 2
    assert "not DDP-ready" in result.stderr  # the good file was still checked


def test_zero_paths_is_not_an_error():
    """What pre-commit runs when no file matches: options, no paths."""
    result = invoke("--check", "--quiet")
    assert result.exit_code == 0
    assert result.stdout == ""


def test_bare_ddpify_prints_usage():
    result = invoke()
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith("Usage: ") and " [OPTIONS] [PATHS]...\n" in result.stderr
    assert "ddpify train.py -o train_ddp.py" in result.stderr


def test_help_lists_exit_codes():
    text = " ".join(invoke("--help").stdout.split())
    assert "Exit codes:" in text
    for code, words in [("0", "done"), ("1", "changes pending"), ("2", "usage error"),
                        ("130", "interrupted")]:
        assert f" {code} {words}" in text


# -- rules ---------------------------------------------------------------------------------

def test_list_rules():
    result = invoke("--list-rules")
    assert result.exit_code == 0
    for code in RULES:
        assert code in result.stdout
    assert len(result.stdout.splitlines()) == len(RULES)


@pytest.mark.parametrize("code", ["DDP201", "ddp201"])
def test_explain(code):
    result = invoke("--explain", code)
    assert result.exit_code == 0
    assert result.stdout.startswith("DDP201 (edit):")
    assert "Why:" in result.stdout and "Fix:" in result.stdout


def test_explain_unknown_code():
    result = invoke("--explain", "DDP999")
    assert result.exit_code == 2
    assert "unknown rule code DDP999" in result.stderr


def test_version():
    from ddpify import __version__

    result = invoke("--version")
    assert result.exit_code == 0
    assert __version__ in result.stdout


@pytest.mark.parametrize("args, shown", [
    ((), True),
    (("--ignore", "DDP206"), False),
    (("--ignore", "ddp2"), False),
    (("--select", "DDP3"), False),
    (("--select", "DDP2,DDP3"), True),
])
def test_select_and_ignore(script, tmp_path, args, shown):
    result = invoke(*args, script, "-o", tmp_path / "out.py")
    assert ("DDP206" in result.stderr) is shown


def test_ignore_changes_the_exit_code(tmp_path, needs_a_person):
    script = write(tmp_path / "custom_sampler.py", NEEDS_A_PERSON)
    assert invoke(script, "-o", tmp_path / "out.py").exit_code == 1
    assert invoke("--ignore", "DDP207", script, "-o", tmp_path / "out.py").exit_code == 0


def test_sync_batchnorm_flag(tmp_path):
    text = guide_text().replace("nn.Flatten(), ", "nn.BatchNorm2d(3), nn.Flatten(), ")
    assert text != guide_text()
    script = write(tmp_path / "train.py", text)
    result = invoke("--sync-batchnorm", script)
    assert result.stdout == migrated(text, sync_batchnorm=True)


def test_keep_global_batch_flag(script):
    result = invoke("--keep-global-batch", script)
    assert result.stdout == migrated(guide_text(), keep_global_batch=True)


# -- usage errors --------------------------------------------------------------------------

@pytest.mark.parametrize("args", [
    ("-i", "--diff", "{script}"),
    ("--check", "--diff", "{script}"),
    ("--twin", "-i", "{script}"),
    ("{script}", "{script}"),
    ("-o", "out.py", "{script}", "{script}"),
    ("-o", "out.py", "-i", "{script}"),
    ("-o", "out.py", "{dir}"),
    ("{dir}",),
    ("-i", "-"),
    ("--twin", "-"),
    ("--check", "-o", "-", "{script}"),
    ("--format", "json", "{script}"),
    ("--format", "xml", "--check", "{script}"),
    ("--jobs", "-1", "--check", "{script}"),
    ("--no-such-option", "{script}"),
])
def test_usage_errors(script, tmp_path, args):
    args = [arg.format(script=script, dir=tmp_path) for arg in args]
    before = snapshot(script)
    result = invoke(*args)
    assert result.exit_code == 2, (args, result.stderr)
    assert result.stderr.strip()
    assert result.stdout == ""
    assert snapshot(script) == before
    assert not (tmp_path / "out.py").exists()


# -- bad input -----------------------------------------------------------------------------

def _assert_one_clear_error(result, *words):
    assert result.exit_code == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("ddpify: error:")]
    assert len(errors) == 1, result.stderr
    for word in words:
        assert word in errors[0]


def test_syntax_error_names_file_and_line(tmp_path):
    broken = write(tmp_path / "broken.py", "import torch\n\nmodel = torch.nn.Linear(2,\n\nfor x in y:\n    pass\n")
    before = snapshot(broken)
    out = tmp_path / "out.py"
    result = invoke(broken, "-o", out)
    _assert_one_clear_error(result, f"{broken}:3:", "syntax error")
    assert snapshot(broken) == before
    assert not out.exists()


def test_syntax_error_does_not_truncate_existing_output(tmp_path):
    broken = write(tmp_path / "broken.py", "import torch\nx = (\n")
    out = write(tmp_path / "out.py", "previous contents\n")
    before = snapshot(out)
    _assert_one_clear_error(invoke(broken, "-o", out), str(broken))
    assert snapshot(out) == before


def test_python2_source(tmp_path):
    old = write(tmp_path / "old.py", "import torch\n\nprint 'loss', 1.0\n")
    _assert_one_clear_error(invoke(old, "-o", tmp_path / "out.py"), f"{old}:3:", "Python 2")
    assert not (tmp_path / "out.py").exists()


def test_python2_octal_literal(tmp_path):
    old = write(tmp_path / "old.py", "import torch\n\nmode = 0755\n")
    _assert_one_clear_error(invoke("--check", old), f"{old}:3:", "Python 2")


def test_binary_file(tmp_path):
    binary = tmp_path / "model.py"
    binary.write_bytes(b"\x80\x02ctorch\x00\x00\x01")
    _assert_one_clear_error(invoke(binary, "-o", tmp_path / "out.py"), str(binary), "binary")
    assert not (tmp_path / "out.py").exists()


def test_non_utf8_without_declaration(tmp_path):
    latin = tmp_path / "latin.py"
    latin.write_bytes("import torch\n# caf\u00e9\n".encode("latin-1"))
    before = snapshot(latin)
    _assert_one_clear_error(invoke(latin, "-o", tmp_path / "out.py"), str(latin), "coding declaration")
    assert snapshot(latin) == before
    assert not (tmp_path / "out.py").exists()


def test_missing_path(tmp_path):
    _assert_one_clear_error(invoke(tmp_path / "nope.py"), "nope.py", "no such file")


def test_output_into_missing_directory(script, tmp_path):
    before = snapshot(script)
    out = tmp_path / "no" / "such" / "dir" / "out.py"
    _assert_one_clear_error(invoke(script, "-o", out), "does not exist")
    assert not out.parent.exists()
    assert snapshot(script) == before


@pytest.mark.parametrize("text", ["", "\n", NO_TRAINING, "# just a comment about torch\n"])
def test_nothing_to_migrate(tmp_path, text):
    plain = write(tmp_path / "plain.py", text)
    out = tmp_path / "out.py"
    result = invoke(plain, "-o", out)
    assert result.exit_code == 0
    assert out.read_bytes() == plain.read_bytes()
    assert result.stderr.splitlines() == [f"{plain}:1:1: info: DDP901 no training code found: left unchanged",
                                          f"{out}: written from {plain}"]


def test_nothing_to_migrate_in_place(tmp_path):
    plain = write(tmp_path / "plain.py", NO_TRAINING)
    before = snapshot(plain)
    result = invoke("-i", plain)
    assert result.exit_code == 0
    assert "DDP901" in result.stderr
    assert snapshot(plain) == before


def test_quiet_drops_notes_keeps_warnings(tmp_path, needs_a_person):
    plain = write(tmp_path / "plain.py", NO_TRAINING)
    person = write(tmp_path / "person.py", NEEDS_A_PERSON)
    result = invoke("-q", "--check", plain, person)
    assert "DDP901" not in result.stderr
    assert "DDP207" in result.stderr
    assert "files:" not in result.stderr


def test_internal_error_is_reported_not_raised(script, monkeypatch):
    import ddpify.api

    def explode(code, options, project):
        raise RuntimeError("boom")

    monkeypatch.setattr(ddpify.api, "migrate_source", explode)
    result = invoke("--check", script)
    _assert_one_clear_error(result, "internal error", "boom")


# -- start-up: the CLI never imports torch to migrate ----------------------------------------

def _imported_modules(*args, cwd=None):
    completed = subprocess.run([sys.executable, "-X", "importtime", "-m", "ddpify", *map(str, args)],
                               capture_output=True, text=True, cwd=cwd)
    modules = {line.split("|")[-1].strip() for line in completed.stderr.splitlines()
               if line.startswith("import time:")}
    return completed, modules


def test_version_does_not_import_torch():
    completed, modules = _imported_modules("--version")
    assert completed.returncode == 0
    assert "click" in modules  # the measurement works
    assert not {name for name in modules if name == "torch" or name.startswith("torch.")}


def test_migrating_does_not_import_torch(script, tmp_path):
    completed, modules = _imported_modules(script, "-o", tmp_path / "out.py")
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert "libcst" in modules
    assert not {name for name in modules if name == "torch" or name.startswith("torch.")}


def test_no_shard_eval_flag(tmp_path):
    text = (FIXTURES / "evaluation" / "eval_sum_and_count_accuracy" / "input.py").read_text()
    script = write(tmp_path / "train.py", text)
    sharded, whole = invoke(script), invoke("--no-shard-eval", script)
    assert sharded.stdout == migrated(text) and "evaluation_shard(" in sharded.stdout
    assert whole.stdout == migrated(text, shard_evaluation=False)
    assert "evaluation_shard(" not in whole.stdout and "every_rank(" not in whole.stdout
