"""The probe: its helpers in-process, and what it records from a real script."""
import io
import os
import runpy
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pytest

from ddpify.verify import records
from ddpify.verify.probing.paths import path_scope
from ddpify.verify.probing.recorders import LineRecorder
from ddpify.verify.probing.torch_objects import has_module_prefix, saved_tensors, shard_figures, whole
from ddpify.verify.probing.tracebacks import error_line, script_traceback
from ddpify.verify.runner import clean_environment

SCRIPT = os.path.join(os.path.dirname(__file__), "data", "verify_probe_script.py")


def test_has_module_prefix_looks_into_nested_state_dicts():
    assert has_module_prefix({"module.fc.weight": 1})
    assert has_module_prefix({"model": {"module.fc.weight": 1}, "optimizer": {0: {}}})
    assert not has_module_prefix({"model": {"fc.weight": 1}, "epoch": 3})
    assert not has_module_prefix(["module.fc.weight"])


def test_shard_figures_and_saved_tensors_on_a_real_fsdp2_model(monkeypatch):
    """A group of one with Gloo: fully_shard still replaces every parameter with a DTensor,
    which is what tells an optimizer built before it (holding the old tensors) from one
    built after; model.state_dict() then holds DTensors, a gathered one plain tensors."""
    import socket

    import torch
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.fsdp import fully_shard

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
        before = torch.optim.SGD(model.parameters(), lr=0.1)
        fully_shard(model)
        after = torch.optim.SGD(model.parameters(), lr=0.1)
        params = [p for group in after.param_groups for p in group["params"]]
        assert shard_figures(params, [model]) == {"params": 4, "dtensor_params": 4, "in_sharded_modules": 4,
                                                  "sharded_module_params": 4, "local_numel": 25, "full_numel": 25}
        stale = [p for group in before.param_groups for p in group["params"]]
        assert shard_figures(stale, [model])["in_sharded_modules"] == 0
        assert shard_figures(stale, [model])["dtensor_params"] == 0
        assert type(whole(params[0])) is torch.Tensor and whole(params[0]).shape == (4, 4)
        assert saved_tensors({"model": model.state_dict(), "epoch": 1})["model.0.weight"] == [[4, 4], "DTensor"]
        full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        assert saved_tensors(full) == {"0.weight": [[4, 4], "Tensor"], "0.bias": [[4], "Tensor"],
                                       "1.weight": [[1, 4], "Tensor"], "1.bias": [[1], "Tensor"]}
        assert saved_tensors({"optimizer": after.state_dict()}) == {}
    finally:
        dist.destroy_process_group()


def test_path_scope(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert path_scope("ckpt.pth") == "cwd"
    assert path_scope("/dev/null") == "system"
    assert path_scope("/nonexistent-root-dir/ckpt.pth") == "outside"
    assert path_scope("/runs/r1/tmp/x", ["/runs/r1"]) == "run"
    assert path_scope("/runs/r10/tmp/x", ["/runs/r1"]) == "outside"
    # The short TMPDIR a run with a long directory gets under /tmp is the run's own too.
    assert path_scope("/tmp/ddpify-tmp-ab12/pymp-x/f", ["/runs/r1", "/tmp/ddpify-tmp-ab12"]) == "run"


def test_line_recorder_passes_through_and_records_whole_lines():
    stream, lines = io.StringIO(), []
    recorder = LineRecorder(stream, lines.append)
    recorder.write("epoch 0")
    recorder.write(": ok\nnext\n")
    recorder.write("tail")
    recorder.flush_pending()
    assert stream.getvalue() == "epoch 0: ok\nnext\ntail"
    assert lines == ["epoch 0: ok", "next", "tail"]


def test_a_failure_inside_the_standard_library_is_placed_at_the_scripts_line(tmp_path, monkeypatch):
    """`<frozen os>` names no file: taken as a relative path it seemed to lie in the working
    directory, and a FileExistsError was placed at `<frozen os>:225`, not at the script's line."""
    script = tmp_path / "train_ddp.py"
    script.write_text("import os\n\nos.makedirs('runs')\nos.makedirs('runs')\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileExistsError) as raised:
        runpy.run_path(str(script))
    assert error_line(raised.value, str(tmp_path)) == "train_ddp.py:4"
    frames = script_traceback(raised.value, str(tmp_path))
    assert frames[0] == "train_ddp.py:4 in <module>: os.makedirs('runs')" and len(frames) == 2
    assert frames[1].startswith("<frozen os>:") and frames[1].endswith(" in makedirs")


def run_probe(tmp_path, *options, workers="0"):
    """The probe in tmp_path/work, recording into tmp_path/record, with TMPDIR tmp_path/tmp:
    the layout of a run directory."""
    record, work, scratch = tmp_path / "record", tmp_path / "work", tmp_path / "tmp"
    work.mkdir()
    scratch.mkdir()
    completed = subprocess.run(
        [sys.executable, "-m", "ddpify.verify.probe", "--record", str(record), *options, SCRIPT, workers],
        cwd=work, env=dict(clean_environment([]), TMPDIR=str(scratch)), capture_output=True, text=True, timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stdout, records.load_events(str(record))[0]


@pytest.mark.slow
def test_probe_records_epochs_steps_saves_writes_and_prints(tmp_path):
    stdout, events = run_probe(tmp_path, "--max-epochs", "2")
    kinds = Counter(event["ev"] for event in events)
    lines = [event["line"] for event in events if event["ev"] == "print"]
    assert stdout.splitlines() == lines and [line[:13] for line in lines] == ["epoch 0 loss ", "epoch 1 loss "]
    assert {event["where"] for event in events if event["ev"] == "print"} == {"verify_probe_script.py:28"}
    assert kinds["step"] == 12 and kinds["stop"] == 1 and kinds["end"] == 0
    train = [event for event in events if event["ev"] == "fetch" and event["loader"] == 0]
    assert [sorted(i for e in train if e["epoch"] == epoch for i in e["indices"]) for epoch in (0, 1)] == [
        list(range(24))
    ] * 2
    assert {event["loader"] for event in events if event["ev"] == "step"} == {0}
    # Scratch files in the run's own TMPDIR (torch makes some) are not the script's output.
    assert {(e["path"], e["scope"], e["where"]) for e in events if e["ev"] == "write" and e["scope"] != "run"} == {
        ("log.txt", "cwd", "verify_probe_script.py:29")
    }
    assert all(e["module_prefix"] for e in events if e["ev"] == "save")
    assert [e["value"] for e in events if e["ev"] == "seed"] == [0]
    assert next(e for e in events if e["ev"] == "iter")["shuffle"] is True


@pytest.mark.slow
def test_probe_records_indices_with_worker_processes_and_stops_after_max_steps():
    # DataLoader workers bind a Unix socket in TMPDIR, whose path may be 107 characters at
    # most: a pytest-xdist worker's tmp_path is too long for it (the workers fail, the probe
    # waits on them), so this run lies in a short folder of its own.
    short = Path(tempfile.mkdtemp(prefix="probe-", dir="/tmp"))
    try:
        _, events = run_probe(short, "--max-steps", "3", workers="2")
    finally:
        shutil.rmtree(short, ignore_errors=True)
    steps = [event for event in events if event["ev"] == "step"]
    fetched = [i for event in events if event["ev"] == "fetch" for i in event["indices"]]
    assert len(steps) == 3 and events[-1] == {"ev": "stop", "reason": "max_steps", "steps": 3}
    # Indices are recorded as they are sent to the workers, which prefetch ahead.
    assert len(fetched) >= 12 and len(set(fetched)) == len(fetched)


@pytest.mark.slow
def test_probe_cuts_later_epochs_to_one_batch_so_the_script_reaches_its_end(tmp_path):
    stdout, events = run_probe(tmp_path, "--full-epochs", "2")
    steps = [event for event in events if event["ev"] == "step"]
    cuts = {(event["loader"], event["epoch"]) for event in events if event["ev"] == "cut"}
    assert len(steps) == 6 + 6 + 1 + 1 + 1 and stdout.splitlines()[-1] == "done"
    # Both the training and the evaluation loader yield one batch from epoch 2 on.
    assert cuts == {(loader, epoch) for loader in (0, 1) for epoch in (2, 3, 4)}
    assert events[-1]["ev"] == "end" and events[-1]["status"] == 0 and events[-1]["t"] > 0
    writes = {e["path"]: e["scope"] for e in events if e["ev"] == "write"}
    assert writes["log.txt"] == "cwd" and writes[str(tmp_path / "tmp" / "scratch.txt")] == "run"
