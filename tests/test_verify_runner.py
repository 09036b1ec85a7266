"""When the runner runs a torchrun run a second time, and what it leaves behind."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from ddpify.verify.reaper import parent_links
from ddpify.verify.records import RunResult
from ddpify.verify.runner import GLOO_TEARDOWN_ABORT, Launch, aborted_after_finishing, launch_and_wait


def run(returncode, tail, ranks_ended=(0, 1)):
    events = {rank: [{"ev": "end", "status": 0}] for rank in ranks_ended}
    return RunResult(name="torchrun", commands=[], returncodes=[returncode], timed_out=False,
                     seconds=1.0, world_size=2, events=events, output_tail=tail)


def test_gloo_abort_after_every_rank_finished_is_retried():
    assert aborted_after_finishing(run(1, f"... {GLOO_TEARDOWN_ABORT}\nSignal 6 (SIGABRT)"))


def test_other_failures_are_not_retried():
    assert not aborted_after_finishing(run(0, ""))
    assert not aborted_after_finishing(run(1, "RuntimeError: boom"))
    # A rank that never reached the end failed for real, whatever the exit looked like.
    assert not aborted_after_finishing(run(1, GLOO_TEARDOWN_ABORT, ranks_ended=(0,)))


# -- nothing left behind (issue 10, item 7): real processes, real signals ------------------

# A process that starts a grandchild in a session of its own (out of reach of killpg), then waits.
ESCAPER = (
    "import subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'], start_new_session=True)\n"
    "print('started', flush=True)\n"
    "time.sleep(float(sys.argv[1]))\n"
)


def processes_in(directory):
    found = []
    for pid in parent_links():
        try:
            if os.readlink(f"/proc/{pid}/cwd").startswith(str(directory)):
                found.append(pid)
        except OSError:
            continue
    return found


def wait_until(condition, seconds=20.0):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def escaper_launch(tmp_path, wait_s):
    return Launch([sys.executable, "-c", ESCAPER, str(wait_s)], str(tmp_path), dict(os.environ))


@pytest.mark.slow  # a process-level shell test of several seconds; CI runs it
def test_a_timeout_kills_processes_that_left_the_process_group(tmp_path):
    log = tmp_path / "out.txt"
    returncodes, timed_out = launch_and_wait([escaper_launch(tmp_path, 300)], [str(log)], time.time() + 3,
                                             [str(tmp_path / "reaper.json")])
    assert timed_out and "started" in log.read_text()
    assert wait_until(lambda: not processes_in(tmp_path), 5), processes_in(tmp_path)


def test_the_reaper_reports_and_kills_what_outlives_its_command(tmp_path):
    report = tmp_path / "reaper.json"
    returncodes, timed_out = launch_and_wait([escaper_launch(tmp_path, 0)], [str(tmp_path / "out.txt")],
                                             time.time() + 60, [str(report)])
    assert returncodes == [0] and not timed_out
    leftovers = json.loads(report.read_text())["leftovers"]
    assert len(leftovers) == 1 and "time.sleep(300)" in leftovers[0]["cmdline"]
    assert not processes_in(tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("signum, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_to_verify_stops_every_process_it_started(tmp_path, signum, status):
    script = tmp_path / "train.py"
    script.write_text("import torch\n" + ESCAPER.replace("float(sys.argv[1])", "300"))
    migrated = tmp_path / "train_ddp.py"
    migrated.write_text("# migrated\n" + script.read_text())
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = dict(os.environ, TMPDIR=str(scratch))
    verify = subprocess.Popen(
        [sys.executable, "-m", "ddpify.verify", str(script), "-o", str(migrated), "--checks", "same_as_original"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        # A test run started in the background of a shell inherits SIGINT ignored (and so
        # would verify, which would then never see it): give it the default disposition.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    # Both plain runs (original, group of one) have started their grandchild, out of the group.
    from ddpify.verify.reaper import describe

    def escaped():
        return [pid for pid in processes_in(scratch) if "time.sleep(300)" in describe(pid)["cmdline"]]

    assert wait_until(lambda: len(escaped()) == 2, 90), "the runs never started their grandchildren"
    verify.send_signal(signum)
    output, _ = verify.communicate(timeout=30)
    assert verify.returncode == status, output
    assert "every process it started was stopped" in output
    assert not processes_in(scratch), [describe(pid) for pid in processes_in(scratch)]
    assert not os.listdir(scratch), os.listdir(scratch)


def test_a_failed_launch_stops_the_others_after_a_grace_instead_of_reaching_the_deadline(tmp_path, monkeypatch):
    """Issue 18: one torchrun agent's rank crashed while the other agent waited for it; the
    run sat until its limit and read as a hang. Now the survivor is stopped soon after."""
    from ddpify.verify import runner

    monkeypatch.setattr(runner, "PEER_FAILURE_GRACE_S", 0.5)
    crashes = Launch([sys.executable, "-c", "raise SystemExit(3)"], str(tmp_path), dict(os.environ))
    started = time.time()
    returncodes, timed_out = launch_and_wait(
        [escaper_launch(tmp_path, 300), crashes], [str(tmp_path / "a.txt"), str(tmp_path / "b.txt")],
        started + 30, [str(tmp_path / "a.json"), str(tmp_path / "b.json")])
    assert not timed_out and time.time() - started < 15
    assert returncodes[1] == 3 and returncodes[0] != 0
    assert wait_until(lambda: not processes_in(tmp_path), 5), processes_in(tmp_path)


# -- a TMPDIR short enough for Unix sockets ------------------------------------------------

def long_folder(tmp_path):
    """A --temp-parent whose runs' own TMPDIR would be too long for a Unix socket's path."""
    folder = tmp_path / ("x" * 60) / ("y" * 60)
    folder.mkdir(parents=True)
    return str(folder)


def test_a_run_folder_too_long_for_a_unix_socket_gets_a_short_tmpdir(tmp_path):
    from multiprocessing.connection import Listener

    from ddpify.verify.runner import sandbox_environment, scratch_directory, socket_fits

    run_dir = os.path.join(long_folder(tmp_path), "torchrun")
    os.makedirs(run_dir)
    assert not socket_fits(os.path.join(run_dir, "tmp"))
    scratch = scratch_directory(run_dir)
    try:
        assert socket_fits(scratch) and not scratch.startswith(run_dir)
        # Found from the run's folder, and named to the probe, which counts it as the run's own.
        assert os.path.realpath(os.path.join(run_dir, "tmp")) == os.path.realpath(scratch)
        env = sandbox_environment({}, run_dir, scratch)
        assert env["TMPDIR"] == env["DDPIFY_VERIFY_SCRATCH"] == scratch
        # Where multiprocessing (DataLoader workers) binds its socket, under that TMPDIR.
        folder = os.path.join(scratch, "pymp-abcdefgh")
        os.makedirs(folder)
        Listener(os.path.join(folder, "listener-abcdefgh"), family="AF_UNIX").close()
    finally:
        import shutil

        shutil.rmtree(scratch, ignore_errors=True)
    # A short run folder keeps its TMPDIR inside it. (Not under tmp_path: an xdist
    # worker's tmp_path is itself near the socket limit.)
    import tempfile

    short_run = tempfile.mkdtemp(prefix="r", dir="/tmp")
    try:
        assert scratch_directory(short_run) == os.path.join(short_run, "tmp")
    finally:
        shutil.rmtree(short_run, ignore_errors=True)


WORKERS_SCRIPT = (
    "import tempfile, torch\n"
    "from torch.utils.data import DataLoader, TensorDataset\n"
    "loader = DataLoader(TensorDataset(torch.arange(8.0)), batch_size=2, num_workers=2)\n"
    "print(sum(float(batch.sum()) for (batch,) in loader))\n"
    "with open(tempfile.gettempdir() + '/scratch.txt', 'w') as scratch:\n"
    "    scratch.write('cache')\n"
)


@pytest.mark.slow  # a real DataLoader(num_workers=2) run of several seconds; CI runs it
def test_dataloader_workers_run_under_a_long_temp_parent_and_its_short_tmpdir_is_removed(tmp_path):
    from ddpify.verify.runner import Runner, RunSettings

    script = tmp_path / "workers.py"
    script.write_text(WORKERS_SCRIPT)
    runner = Runner(RunSettings(timeout=60.0, temp_parent=long_folder(tmp_path)))
    with runner:
        result = runner.run_plain("original", str(script), gpus=[])
        shorts = list(runner.short_scratch)
    assert result.ok and not result.timed_out, result.output_tail
    assert "28.0" in result.output_tail
    writes = [event for event in result.events[0] if event["ev"] == "write"]
    assert [event["scope"] for event in writes if event["path"].endswith("scratch.txt")] == ["run"]
    assert shorts and not any(os.path.exists(short) for short in shorts)
