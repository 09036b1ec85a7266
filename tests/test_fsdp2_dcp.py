"""`--strategy fsdp2 --checkpoint dcp` (issue 19): the command line, and the fixture's
Distributed Checkpoint resumed for real, on as many ranks as wrote it or on fewer, and shown
to need numpy under torchrun (DDP930)."""
import os
import shutil
import subprocess
import sys

import pytest
from cli_support import invoke, write
from fixture_cases import FIXTURES
from script_runs import run_python, run_torchrun

DCP = FIXTURES / "fsdp2" / "dcp_checkpoint"
# Makes `import numpy` fail, as in a venv without it (torch does not install numpy).
NO_NUMPY = "import sys\nsys.modules['numpy'] = None\n"


def test_checkpoint_dcp_writes_the_fixture_and_says_it_needs_numpy(tmp_path):
    script = write(tmp_path / "train.py", (DCP / "input.py").read_text())
    result = invoke(script, "--strategy", "fsdp2", "--checkpoint", "dcp")
    assert result.exit_code == 1
    assert result.stdout == (DCP / "expected.py").read_text()
    assert "DDP930" in result.stderr


def test_a_script_that_imports_numpy_gets_no_numpy_warning(tmp_path):
    text = (DCP / "input.py").read_text().replace("import argparse\n", "import argparse\n\nimport numpy as np\n")
    result = invoke(write(tmp_path / "train.py", text), "--strategy", "fsdp2", "--checkpoint", "dcp")
    assert result.exit_code == 0, result.stderr
    assert "dcp.save(" in result.stdout and "DDP930" not in result.stderr


def test_checkpoint_dcp_with_ddp_is_a_usage_error(tmp_path):
    script = write(tmp_path / "train.py", (DCP / "input.py").read_text())
    result = invoke(script, "--checkpoint", "dcp")
    assert result.exit_code == 2
    assert "--checkpoint dcp" in result.stderr and "--strategy fsdp2" in result.stderr


def test_checkpoint_full_is_the_default(tmp_path):
    script = write(tmp_path / "train.py", (DCP / "input.py").read_text())
    result = invoke(script, "--strategy", "fsdp2")
    assert "dcp." not in result.stdout and "get_model_state_dict(\n" in result.stdout
    assert result.stdout == invoke(script, "--strategy", "fsdp2", "--checkpoint", "full").stdout


@pytest.mark.slow
def test_a_dcp_checkpoint_resumes_exactly_and_on_fewer_ranks(tmp_path):
    """As one process the migrated script resumes to the original's very numbers (model and
    optimizer state went through dcp.save and dcp.load unchanged); a checkpoint two ranks
    wrote resumes under torchrun, and in plain python, where DCP reshards it onto one."""
    pytest.importorskip("numpy", reason="Distributed Checkpoints need numpy under torchrun (DDP930)")
    original = [run_python(DCP / "input.py", tmp_path / "original", args) for args in (["--epochs", "2"], [])]
    single = [run_python(DCP / "expected.py", tmp_path / "single", args) for args in (["--epochs", "2"], [])]
    assert [run.stdout for run in single] == [run.stdout for run in original], single[1].stderr
    assert original[1].stdout.startswith("resumed after epoch 1\nepoch 2: loss ")

    first = run_torchrun(DCP / "expected.py", tmp_path / "torchrun", ["--epochs", "2"])
    assert first.returncode == 0, first.stderr[-3000:]
    shutil.copytree(tmp_path / "torchrun", tmp_path / "fewer")
    resumed = run_torchrun(DCP / "expected.py", tmp_path / "torchrun", ["--epochs", "4"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert resumed.lines[0] == "resumed after epoch 1" and resumed.lines[-1].startswith("epoch 3: loss ")
    fewer = run_python(DCP / "expected.py", tmp_path / "fewer")
    assert fewer.returncode == 0, fewer.stderr[-3000:]
    assert fewer.lines[0] == "resumed after epoch 1" and fewer.lines[1].startswith("epoch 2: loss ")


@pytest.mark.slow
def test_dcp_under_torchrun_fails_without_numpy(tmp_path):
    """What DDP930 warns of, checked on the torch installed: if this starts to pass, DCP no
    longer needs numpy and DDP930 should go."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(NO_NUMPY)
    run = run_torchrun(DCP / "expected.py", tmp_path / "run", ["--epochs", "1"], env={"PYTHONPATH": str(site)},
                       fresh_ranks=True)  # (the test server's ranks would find numpy imported)
    assert run.returncode != 0
    assert "Numpy is not available" in run.stderr
    # As a group of one, dcp.save and dcp.load exchange nothing: no numpy needed. A fresh
    # interpreter (run_python forks a server that has imported torch, and numpy with it).
    (tmp_path / "single").mkdir()
    single = subprocess.run([sys.executable, str(DCP / "expected.py"), "--epochs", "1"], cwd=tmp_path / "single",
                            env={**os.environ, "PYTHONPATH": str(site)}, capture_output=True, text=True, timeout=120)
    assert single.returncode == 0, single.stderr[-3000:]
    assert (tmp_path / "single" / "checkpoint.pt" / ".metadata").is_file()


RESUME = FIXTURES / "fsdp2" / "resume_from_full_checkpoint"


def _resume_with_dcp(tmp_path):
    script = write(tmp_path / "train.py", (RESUME / "input.py").read_text())
    return invoke(script, "--strategy", "fsdp2", "--checkpoint", "dcp")


def test_a_checkpoint_resumed_then_saved_under_the_same_name_becomes_dcp(tmp_path):
    """`checkpoint = torch.load(...)`, read by key, then `checkpoint = {...}` saved: the
    reads before the new binding say what dcp.load fills in."""
    result = _resume_with_dcp(tmp_path)
    assert "DDP931" not in result.stderr and "torch.load" not in result.stdout
    assert '            "epoch": None,\n        }\n        dcp.load(checkpoint, checkpoint_id=CHECKPOINT)\n' \
        in result.stdout
    assert "    dcp.save(checkpoint, checkpoint_id=CHECKPOINT)\n" in result.stdout


@pytest.mark.slow
def test_the_resume_fixture_with_dcp_prints_what_the_original_prints(tmp_path):
    pytest.importorskip("numpy", reason="Distributed Checkpoints need numpy under torchrun (DDP930)")
    migrated = write(tmp_path / "migrated.py", _resume_with_dcp(tmp_path).stdout)
    original = run_python(RESUME / "input.py", tmp_path / "original")
    single = run_python(migrated, tmp_path / "single")
    assert single.returncode == 0 and single.stdout == original.stdout, single.stderr[-3000:]
    distributed = run_torchrun(migrated, tmp_path / "torchrun")
    assert distributed.returncode == 0, distributed.stderr[-3000:]
    assert distributed.lines[-1].startswith("epoch 3: loss ")
