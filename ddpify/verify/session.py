"""One verification: choose the runs the checks need, launch them in order, judge them."""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Sequence

from ddpify.verify.checks import (
    CHECK_IDS, MULTINODE, ORIGINAL, SINGLE, TORCHRUN, CheckResult, FAIL, evaluate, runs_needed,
)
from ddpify.verify.records import RunResult
from ddpify.verify.runner import Runner, RunSettings

# The process count when there are not two GPUs to give one process each: Gloo on the CPU.
CPU_NPROC = 2


@dataclass
class Report:
    original: str
    migrated: str
    nproc: int
    use_gpus: bool
    settings: RunSettings
    runs: Dict[str, RunResult]
    checks: List[CheckResult]
    seconds: float
    notes: List[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(check.status != FAIL for check in self.checks)


def gpus_seen(runs: Mapping[str, RunResult]) -> Optional[int]:
    """How many CUDA devices torch saw in a plain run, if one happened."""
    for run in runs.values():
        for event in run.events.get(0, []):
            if event["ev"] == "start":
                return event.get("cuda_devices", 0)
    return None


def visible_gpu_ids() -> List[str]:
    """GPU ids without importing torch here (start-up time): CUDA_VISIBLE_DEVICES or nvidia-smi."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [device for device in visible.split(",") if device.strip() and device.strip() != "-1"]
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(index) for index, line in enumerate(listing.splitlines()) if line.startswith("GPU ")]


def ordered_checks(requested: Sequence[str]) -> List[str]:
    """The requested checks in report order; `runs` is always one of them."""
    return [check_id for check_id in CHECK_IDS if check_id in requested or check_id == "runs"]


def verify(
    original: str,
    migrated: str,
    settings: RunSettings,
    checks: Sequence[str] = CHECK_IDS,
    nproc: Optional[int] = None,
    keep_temp: bool = False,
    on_run: Callable[[RunResult], None] = lambda run: None,
) -> Report:
    started = time.time()
    check_ids = ordered_checks(checks)
    needed = runs_needed(check_ids)
    runs: Dict[str, RunResult] = {}
    notes = []
    with Runner(settings, keep=keep_temp) as runner:
        if keep_temp:
            notes.append(f"run directories kept in {runner.root}")
        for name, script in ((ORIGINAL, original), (SINGLE, migrated)):
            if name in needed:
                runs[name] = runner.run_plain(name, script)
                on_run(runs[name])
        gpu_ids = visible_gpu_ids()
        gpu_count = gpus_seen(runs)
        gpu_count = len(gpu_ids) if gpu_count is None else gpu_count
        processes = nproc or (gpu_count if gpu_count > 1 else CPU_NPROC)
        use_gpus = gpu_count >= processes
        if TORCHRUN in needed:
            runs[TORCHRUN] = runner.run_torchrun(TORCHRUN, migrated, processes, use_gpus)
            on_run(runs[TORCHRUN])
        if MULTINODE in needed:
            per_node = (gpu_ids or ["0", "1"])[:2] if gpu_count >= 2 else None
            runs[MULTINODE] = runner.run_multinode(MULTINODE, migrated, per_node)
            on_run(runs[MULTINODE])
    return Report(
        original=original,
        migrated=migrated,
        nproc=processes,
        use_gpus=use_gpus,
        settings=settings,
        runs=runs,
        checks=evaluate(runs, check_ids),
        seconds=time.time() - started,
        notes=notes,
    )
