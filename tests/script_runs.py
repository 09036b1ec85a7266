"""Running a training script for real: plain python and torchrun (Gloo on CPU).

The checks here are plain functions so that tests/test_script_runs.py can show each one
failing on a deliberately broken script.
"""
import os
import re
import shutil
import subprocess
import sys
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import List, Sequence

GLOO_TEARDOWN_ABORT = "terminate called without an active exception"
GLOO_ABORT_RETRIES = 2
TORCHRUN_ENV_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                     "MASTER_PORT", "GROUP_RANK", "TORCHELASTIC_RUN_ID")


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    workdir: Path

    @property
    def lines(self) -> List[str]:
        return self.stdout.splitlines()


def _environment() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_ENV_VARS}
    env["PYTHONHASHSEED"] = "0"
    env["OMP_NUM_THREADS"] = "1"
    return env


def run_python(script: Path, workdir: Path, args: Sequence[str] = (), timeout: int = 120) -> Run:
    return _run([sys.executable, script.name, *args], script, workdir, timeout)


def run_torchrun(script: Path, workdir: Path, args: Sequence[str] = (), nproc: int = 2,
                 timeout: int = 180) -> Run:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc_per_node={nproc}", script.name, *args]
    run = _run(command, script, workdir, timeout)
    for _ in range(GLOO_ABORT_RETRIES):
        if run.returncode == 0 or GLOO_TEARDOWN_ABORT not in run.stderr:
            break
        # Under heavy CPU contention Gloo's worker threads sometimes abort while the
        # interpreter exits (pytorch/pytorch#179291), after the script has finished. It is
        # not the script's doing; run it again, in a clean directory, before judging.
        warnings.warn(f"{script.name}: Gloo aborted at exit; running it again")
        shutil.rmtree(workdir)
        run = _run(command, script, workdir, timeout)
    return run


def _run(command, script: Path, workdir: Path, timeout: int) -> Run:
    workdir.mkdir(parents=True, exist_ok=True)
    shutil.copy(script, workdir / script.name)
    completed = subprocess.run(command, cwd=workdir, env=_environment(), capture_output=True,
                               text=True, timeout=timeout)
    return Run(completed.returncode, completed.stdout, completed.stderr, workdir)


def problems_single_process(original: Run, migrated: Run) -> List[str]:
    """Plain `python` on the migrated script must print exactly what the original printed."""
    problems = []
    if original.returncode != 0:
        problems.append(f"original failed: {original.stderr[-2000:]}")
    if migrated.returncode != 0:
        problems.append(f"migrated (python) failed: {migrated.stderr[-2000:]}")
    if migrated.stdout != original.stdout:
        problems.append(f"output differs:\n--- original\n{original.stdout}\n--- migrated\n{migrated.stdout}")
    return problems


def problems_distributed(original: Run, distributed: Run, files: Sequence[str]) -> List[str]:
    """Under torchrun: exit 0, each line printed once, checkpoints exist and load unwrapped."""
    problems = []
    if distributed.returncode != 0:
        problems.append(f"torchrun failed ({distributed.returncode}): {distributed.stderr[-3000:]}")
    # Numbers differ between one and two processes, and a sharded epoch logs fewer steps;
    # but no line may appear more often than the original printed it, and the run must end
    # on the same kind of line.
    original_counts = Counter(map(line_shape, original.lines))
    for shape, count in Counter(map(line_shape, distributed.lines)).items():
        if count > original_counts[shape]:
            problems.append(f"printed {count} times under torchrun, {original_counts[shape]} "
                            f"in the original: {shape!r}")
    if original.lines and (not distributed.lines or
                           line_shape(distributed.lines[-1]) != line_shape(original.lines[-1])):
        problems.append(f"final line differs under torchrun:\n{distributed.stdout}")
    for name in files:
        problems.extend(_checkpoint_problems(distributed.workdir / name))
    return problems


def line_shape(line: str) -> str:
    return re.sub(r"-?\d+(\.\d+)?(e-?\d+)?", "#", line)


def _checkpoint_problems(path: Path) -> List[str]:
    import torch

    if not path.exists():
        return [f"{path.name} was not written"]
    state = torch.load(path, map_location="cpu", weights_only=False)
    keys = _state_dict_keys(state)
    wrapped = [key for key in keys if key.startswith("module.")]
    return [f"{path.name} holds DDP-wrapped keys such as {wrapped[0]!r}"] if wrapped else []


def _state_dict_keys(state) -> List[str]:
    if not isinstance(state, dict):
        return []
    keys = []
    for key, value in state.items():
        if isinstance(value, dict):
            keys.extend(_state_dict_keys(value))
        elif isinstance(key, str):
            keys.append(key)
    return keys
