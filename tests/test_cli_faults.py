"""Faults, signals and strange files (issue 10): never a wrong exit 0, never a damaged file,
never a process or a temporary file left behind.

The signal and crash cases run ddpify as a real process (`python -m ddpify`) and send it real
signals; the file cases use devices, FIFOs and links under a temporary directory.
"""
import faulthandler
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from cli_support import guide_text, invoke, migrated, write

from ddpify import files

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="mknod and chown need root")


def _ddpify(*args, stdout=subprocess.PIPE):
    """ddpify as a user starts it: SIGINT at its default, whatever pytest's parent did."""
    return subprocess.Popen(
        [sys.executable, "-m", "ddpify", *map(str, args)], stdout=stdout,
        stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _big_script(helpers: int) -> str:
    """The guide with `helpers` functions: long enough that a signal lands mid-migration."""
    functions = "".join(f"\n\ndef helper_{i}(x):\n    return x * {i} + torch.ones(1)\n"
                        for i in range(helpers))
    return guide_text().replace("\n\nclass MyModel", functions + "\n\nclass MyModel", 1)


def _wait_for_parser(process, timeout=60):
    """Until libcst's native parser is loaded: the process is migrating, not starting."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if "libcst/native" in Path(f"/proc/{process.pid}/maps").read_text():
                return
        except OSError:
            pass
        time.sleep(0.02)
    raise AssertionError("ddpify never started parsing")


def _children(pid: int):
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _temporaries(directory: Path):
    return sorted(name for name in os.listdir(directory) if name.startswith(".ddpify-"))


# -- 1. Ctrl-C --------------------------------------------------------------------------------

@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc")
def test_sigint_during_a_migration_exits_130_and_writes_nothing(tmp_path):
    source = write(tmp_path / "train.py", _big_script(3000))
    out = tmp_path / "train_ddp.py"
    process = _ddpify(source, "-o", out)
    _wait_for_parser(process)
    time.sleep(0.3)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert "interrupted" in stderr
    assert "Traceback" not in stderr
    assert not out.exists()
    assert _temporaries(tmp_path) == []


def _interrupted_alive(command: list[str], trigger, delay: float = 0.0, tries: int = 5) -> subprocess.Popen:
    """Start `command` under `-X importtime` and send SIGINT `delay` seconds after the import line
    `trigger` accepts. A try whose process had already ended by then (a busy machine can leave
    this reader a whole pipe's worth of lines behind) proves nothing either way: run again."""
    for _ in range(tries):
        # Ctrl-C's default disposition, as in a terminal: a launcher that ignores SIGINT (a shell
        # job started with `&`) passes SIG_IGN down, and Python then never raises KeyboardInterrupt.
        process = subprocess.Popen([sys.executable, "-X", "importtime", *command],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        for line in process.stderr:
            if trigger(line):
                time.sleep(delay)
                if process.poll() is None:
                    process.send_signal(signal.SIGINT)
                    return process
                break
        process.communicate(timeout=60)
    pytest.skip(f"the process ended before the signal in {tries} tries: the machine is too busy to aim it")


def test_sigint_while_ddpify_loads_exits_130_without_a_traceback():
    """On a busy machine the command's modules take a second or more to load; Ctrl-C then
    reads as it does during a migration. `-X importtime` reports each module as it loads,
    so the signal lands while ddpify.cli's own imports are still running (the analysis
    package loads early, with about a hundred ddpify modules still to come)."""
    process = _interrupted_alive(["-m", "ddpify", "--version"], lambda line: "ddpify.analysis" in line)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert stderr.endswith("ddpify: interrupted\n")
    assert "Traceback" not in stderr
    assert stdout == ""


@pytest.mark.slow  # four ddpify processes; CI runs it
def test_sigint_while_a_dataclass_is_built_in_a_lazy_import_exits_130(tmp_path):
    """libcst.matchers builds hundreds of dataclasses, each by `exec` of a string, when the
    migration first imports ddpify.api; CPython 3.11 remembers a KeyboardInterrupt that
    escapes such an `exec` and, at exit, kills the process with SIGINT (-2) whatever status
    ddpify gave. The signal is sent at four moments of that package's body (a quarter of a
    second of `exec`s after its last submodule loaded): before ddpify.interrupts, about
    two in three of these runs exited -2."""
    source = write(tmp_path / "train.py", "import torch\nx = torch.ones(1)\n")
    out = tmp_path / "train_ddp.py"
    for delay in (0.03, 0.06, 0.09, 0.12):
        process = _interrupted_alive(["-m", "ddpify", str(source), "-o", str(out)],
                                     lambda line: line.rstrip().endswith("libcst.matchers._visitors"), delay)
        _, stderr = process.communicate(timeout=60)
        assert process.returncode == 130, (delay, stderr[-2000:])
        assert stderr.endswith("ddpify: interrupted\n")
        assert not out.exists()


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc")
@pytest.mark.slow  # a process-level shell test of several seconds; CI runs it
@pytest.mark.parametrize("workers", ["1", "2"])
def test_sigint_stops_a_walk(tmp_path, workers):
    """Files done before Ctrl-C are migrated and were reported; the rest are untouched; no
    worker process and no temporary file is left."""
    text = _big_script(300)
    tree = tmp_path / "src"
    tree.mkdir()
    sources = [write(tree / f"train_{index}.py", text) for index in range(8)]
    process = _ddpify("-i", "-j", workers, tree, stdout=subprocess.DEVNULL)
    line = ""
    while "migrated in place" not in line:
        line = process.stderr.readline()
        assert line, "ddpify ended before migrating a file"
    workers_seen = _children(process.pid)
    process.send_signal(signal.SIGINT)
    rest = process.stderr.read()  # the same buffered reader: nothing read ahead is lost
    assert process.wait(timeout=60) == 130, rest
    assert "interrupted after" in rest
    assert "Traceback" not in rest
    reported = {line.split(":")[0] for line in (line + rest).splitlines() if "migrated in place" in line}
    after = migrated(text)
    for path in sources:
        content = path.read_text()
        # (The whole stderr read, on failure: a migrated file whose line was not read, seen
        # once in a CI rehearsal, must show whether the line was lost or misread.)
        assert content == (after if str(path) in reported else text), (path, line + rest)
    assert sum(path.read_text() == text for path in sources) >= 1
    assert _temporaries(tree) == []
    time.sleep(0.5)
    assert [pid for pid in workers_seen if _alive(pid)] == []


# -- 2. Where -o and -i write -----------------------------------------------------------------

@pytest.fixture
def script(tmp_path):
    return write(tmp_path / "train.py", guide_text())


@needs_root
def test_output_onto_a_character_device_streams_to_it(script, tmp_path):
    device = tmp_path / "null"
    os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # like /dev/null
    result = invoke(script, "-o", device)
    assert result.exit_code == 0, result.stderr
    assert stat.S_ISCHR(os.lstat(device).st_mode)
    assert os.lstat(device).st_rdev == os.makedev(1, 3)
    assert _temporaries(tmp_path) == []


@needs_root
def test_output_onto_a_block_device_is_refused(script, tmp_path):
    device = tmp_path / "disk"
    os.mknod(device, 0o660 | stat.S_IFBLK, os.makedev(7, 250))
    result = invoke(script, "-o", device)
    assert result.exit_code == 2
    assert f"{device}: a block device: not written" in result.stderr
    assert stat.S_ISBLK(os.lstat(device).st_mode)


def test_output_onto_a_fifo_streams_to_it(script, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()), daemon=True)
    reader.start()
    result = invoke(script, "-o", fifo)
    reader.join(timeout=60)
    assert result.exit_code == 0, result.stderr
    assert received == [migrated(guide_text())]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.skipif(not Path("/dev/stdout").exists(), reason="needs /dev/stdout")
@pytest.mark.parametrize("append", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_output_to_dev_stdout_streams_into_what_the_caller_opened(script, tmp_path, append):
    """/dev/stdout -> /proc/self/fd/1 -> a pipe or a file: streamed to, never replaced."""
    piped = _ddpify(script, "-o", "/dev/stdout")
    stdout, stderr = piped.communicate(timeout=60)
    assert piped.returncode == 0, stderr
    assert stdout == migrated(guide_text())
    redirected = write(tmp_path / "log.txt", "kept\n")
    with open(redirected, "a" if append else "w") as handle:
        process = _ddpify(script, "-o", "/dev/stdout", stdout=handle)
        assert process.communicate(timeout=60)[0] is None
        assert process.returncode == 0
    assert redirected.read_text() == ("kept\n" if append else "") + migrated(guide_text())


def test_output_through_a_symlink_writes_the_file_it_points_to(script, tmp_path):
    real = write(tmp_path / "real_ddp.py", "old\n")
    link = tmp_path / "train_ddp.py"
    link.symlink_to(real.name)
    assert invoke(script, "-o", link).exit_code == 0
    assert os.path.islink(link)
    assert real.read_text() == migrated(guide_text())


def test_output_through_a_dangling_symlink_creates_its_target(script, tmp_path):
    link = tmp_path / "train_ddp.py"
    link.symlink_to("made_here.py")
    assert invoke(script, "-o", link).exit_code == 0
    assert os.path.islink(link)
    assert (tmp_path / "made_here.py").read_text() == migrated(guide_text())


def test_in_place_on_a_symlink_migrates_the_real_file(tmp_path):
    real = write(tmp_path / "real.py", guide_text())
    link = tmp_path / "train.py"
    link.symlink_to(real.name)
    result = invoke("-i", link)
    assert result.exit_code == 0
    assert f"{link}: migrated in place" in result.stderr
    assert os.path.islink(link)
    assert real.read_text() == migrated(guide_text())


def test_in_place_refuses_to_break_hard_links(script, tmp_path):
    other = tmp_path / "copy.py"
    os.link(script, other)
    result = invoke("-i", script)
    assert result.exit_code == 2
    assert f"{script}: has 2 hard links" in result.stderr
    assert ".ddpify-" not in result.stderr
    assert script.read_text() == guide_text()
    assert os.stat(script).st_ino == os.stat(other).st_ino


@pytest.mark.skipif(ROOT, reason="root may write a read-only file")
def test_in_place_refuses_a_read_only_file_it_may_not_write(script):
    os.chmod(script, 0o444)
    result = invoke("-i", script)
    assert result.exit_code == 2
    assert f"{script}: read-only: not written" in result.stderr
    assert script.read_text() == guide_text()
    assert os.stat(script).st_mode & 0o777 == 0o444


@needs_root
def test_in_place_as_root_writes_a_read_only_copy_says_so_and_keeps_it_read_only(script):
    # A copy of a read-only checkout (the real-world suite's cases are read-only files) is
    # what `ddpify -i .` is asked to migrate.
    os.chmod(script, 0o444)
    result = invoke("-i", script)
    assert result.exit_code in (0, 1)
    assert f"{script}: read-only: written as asked, and left read-only" in result.stderr
    assert "DistributedSampler" in script.read_text()
    assert os.stat(script).st_mode & 0o777 == 0o444


@needs_root
def test_in_place_as_root_keeps_the_owner(script):
    os.chown(script, 12345, 23456)
    os.chmod(script, 0o640)
    assert invoke("-i", script).exit_code == 0
    status = os.stat(script)
    assert (status.st_uid, status.st_gid, status.st_mode & 0o777) == (12345, 23456, 0o640)
    assert script.read_text() == migrated(guide_text())


@needs_root
def test_in_place_on_a_device_is_refused(tmp_path):
    device = tmp_path / "null"
    os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    result = invoke("-i", device)
    assert result.exit_code == 2
    assert "a character device, not a regular file" in result.stderr


# -- 3. Nesting that crashes libcst's native parser -------------------------------------------

DEEP = "import torch\n\nx = " + "(" * 10_000 + "1" + ")" * 10_000 + "\n"
# Flat for Python, which compiles it; 10,000 operands overflow libcst's native stack.
LONG_CHAIN = "import torch\n\nx = " + " and ".join(["a"] * 10_000) + "\n"


@pytest.mark.parametrize("args", [
    ["--check", "-j", "1"],
    # the same walk with workers and in place: seconds each, so CI (the slow tier) runs them
    pytest.param(["--check", "-j", "2"], marks=pytest.mark.slow),
    pytest.param(["-i", "-j", "2"], marks=pytest.mark.slow),
])
def test_deep_nesting_is_an_error_and_the_walk_goes_on(tmp_path, args):
    tree = tmp_path / "src"
    tree.mkdir()
    write(tree / "a.py", guide_text())
    deep = write(tree / "b.py", DEEP)
    write(tree / "c.py", guide_text())
    process = _ddpify(*args, tree)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 2, stderr
    assert f"{deep}:3:" in stderr and "too many nested parentheses" in stderr
    assert "Traceback" not in stderr
    assert "3 files:" in stderr  # the summary: the run went on
    assert deep.read_text() == DEEP
    if "-i" in args:
        assert f"{tree / 'a.py'}: migrated in place" in stderr
        assert f"{tree / 'c.py'}: migrated in place" in stderr
        assert (tree / "c.py").read_text() == migrated(guide_text())


@pytest.mark.slow  # a process-level shell test of several seconds; CI runs it
def test_an_and_chain_that_crashes_libcst_is_an_error_and_the_walk_goes_on(tmp_path):
    tree = tmp_path / "src"
    tree.mkdir()
    write(tree / "a.py", guide_text())
    chain = write(tree / "b.py", LONG_CHAIN)
    process = _ddpify("--check", "-j", "1", tree)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 2, stderr
    assert f"{chain}:3:5: syntax error: nested too deeply for libcst's parser" in stderr
    assert "2 files:" in stderr


def test_nesting_python_rejects_is_a_syntax_error(tmp_path):
    """libcst parses 1,000 nested parentheses; Python does not, so neither does ddpify."""
    source = write(tmp_path / "deep.py", "import torch\nx = " + "(" * 1000 + "1" + ")" * 1000 + "\n")
    result = invoke(source, "-o", tmp_path / "out.py")
    assert result.exit_code == 2
    assert "too many nested parentheses" in result.stderr
    assert not (tmp_path / "out.py").exists()


def test_a_worker_that_dies_is_one_failed_file(tmp_path, monkeypatch):
    """Whatever kills a worker process (here SIGSEGV on one file), that file is reported with
    exit 2 and the others are migrated and reported as usual."""
    import ddpify.api

    real = ddpify.api.migrate_source

    def crash_on_marker(code, options, project):
        if "CRASH" in code:
            faulthandler.disable()  # pytest's, inherited by the worker: no dump on stderr
            os.kill(os.getpid(), signal.SIGSEGV)
        return real(code, options, project)

    monkeypatch.setattr(ddpify.api, "migrate_source", crash_on_marker)
    tree = tmp_path / "src"
    tree.mkdir()
    for name in "abcdef":
        write(tree / f"{name}.py", guide_text() + ("# CRASH\n" if name == "c" else ""))
    result = invoke("-i", "-j", "2", tree)
    assert result.exit_code == 2
    assert f"{tree / 'c.py'}: the worker process migrating it died" in result.stderr
    for name in "abdef":
        assert f"{tree / (name + '.py')}: migrated in place" in result.stderr
        assert (tree / f"{name}.py").read_text() == migrated(guide_text())
    assert "6 files:" in result.stderr


def test_compiling_first_prints_no_warnings_of_its_own(tmp_path):
    """Python warns about `2 (3,)` when compiling; that is for whoever runs the script."""
    source = write(tmp_path / "train.py", guide_text() + "\ntuple_call = lambda: 2 (3,)\n")
    process = _ddpify("--check", source)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 1, stderr
    assert "SyntaxWarning" not in stderr


# -- 4. Input that is not a script ------------------------------------------------------------

@pytest.mark.parametrize("args", [[], ["--check"], ["--diff"], ["-o", "out.py"], ["-i"]])
def test_a_named_file_that_does_not_parse_is_an_error_without_torch_too(tmp_path, args, monkeypatch):
    monkeypatch.chdir(tmp_path)
    source = write(tmp_path / "notes.py", "these are not Python (\n")
    result = invoke(source, *args)
    assert result.exit_code == 2, result.stderr
    assert f"{source}:1:" in result.stderr and "syntax error" in result.stderr
    assert source.read_text() == "these are not Python (\n"
    assert not (tmp_path / "out.py").exists()


def test_a_notebook_is_not_supported(tmp_path):
    notebook = write(tmp_path / "train.ipynb", '{"cells": [], "metadata": {}}\n')
    result = invoke("--check", notebook)
    assert result.exit_code == 2
    assert f"{notebook}: notebooks are not supported" in result.stderr
    assert "nbconvert --to script" in result.stderr


@pytest.mark.parametrize("option", ["--select", "--ignore"])
def test_unknown_rule_code_is_a_usage_error(script, option):
    result = invoke(option, "DDP2O4", "--check", script)  # a letter O, not a zero
    assert result.exit_code == 2
    assert "unknown rule code or prefix DDP2O4" in result.stderr


def test_known_codes_and_prefixes_are_accepted(script):
    assert invoke("--select", "DDP,DDP2,DDP206", "--ignore", "DDP9", "--check", script).exit_code == 1


def test_unknown_rule_code_in_the_config_is_a_usage_error(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.ddpify]\nignore = ["DDP2O6"]\n')
    source = write(tmp_path / "train.py", guide_text())
    result = invoke("--check", source)
    assert result.exit_code == 2
    assert "unknown rule code or prefix DDP2O6" in result.stderr


# -- 6. Leftovers of killed runs --------------------------------------------------------------

def _killed_writer(directory: Path) -> str:
    """A real process that creates its temporary file the way ddpify does and is SIGKILLed."""
    code = ("import os, sys, tempfile; from ddpify import files\n"
            "fd, path = tempfile.mkstemp(dir=sys.argv[1], prefix=files._temporary_prefix(),"
            " suffix=files.TEMPORARY_SUFFIX)\n"
            "os.write(fd, b'x' * 100000); print(os.path.basename(path), flush=True)\n"
            "os.kill(os.getpid(), 9)\n")
    process = subprocess.run([sys.executable, "-c", code, str(directory)], capture_output=True,
                             text=True, timeout=60)
    assert process.returncode == -signal.SIGKILL
    return process.stdout.strip()


def test_leftovers_of_a_killed_run_are_removed_by_the_next(script, tmp_path, monkeypatch):
    monkeypatch.setattr(files, "_cleaned_directories", set())
    leftover = _killed_writer(tmp_path)
    users = write(tmp_path / ".ddpify-notes.tmp", "mine\n")
    live = tmp_path / f"{files._temporary_prefix()}abcd1234.tmp"  # this process: still running
    live.write_text("")
    assert (tmp_path / leftover).exists()
    assert invoke(script, "-o", tmp_path / "train_ddp.py").exit_code == 0
    assert not (tmp_path / leftover).exists()
    assert users.read_text() == "mine\n"
    assert live.exists()


def test_a_vanished_temporary_is_never_named_as_the_failing_file(tmp_path, monkeypatch):
    """Someone removes the temporary file between the write and the rename."""
    target = write(tmp_path / "out.py", "old\n")

    def vanish(source, destination):
        os.unlink(source)
        raise FileNotFoundError(2, "No such file or directory", source)

    monkeypatch.setattr(files.os, "replace", vanish)
    with pytest.raises(files.SourceError) as raised:
        files.write_atomically(str(target), b"new\n")
    assert str(raised.value).startswith(f"{target}: cannot write: No such file or directory")
    assert ".ddpify-" not in str(raised.value)
    assert target.read_text() == "old\n"
