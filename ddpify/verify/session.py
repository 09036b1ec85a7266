"""One verification: choose the devices and the runs the checks need, launch them in order,
judge them."""
from __future__ import annotations

import ast
import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Callable

from ddpify.analysis.ast_names import main_guarded
from ddpify.verify.checks import CHECK_IDS, default_checks, evaluate, runs_needed
from ddpify.verify.checks.handoff import early_reads, handoff_paths
from ddpify.verify.checks.result import FAIL, CheckResult
from ddpify.verify.records import RunResult
from ddpify.verify.run_set import HANDOFF, IMPORT, MULTINODE, ORIGINAL, ORIGINAL_IMPORT, SINGLE, TORCHRUN, RunSet
from ddpify.verify.runner import Runner, RunSettings

# The process count when there are not two GPUs to give one process each: Gloo on the CPU.
CPU_NPROC = 2


class DeviceError(ValueError):
    """--device/--nproc ask for GPUs that are not there."""


@dataclass(frozen=True)
class DevicePlan:
    """Which devices each run sees (CUDA_VISIBLE_DEVICES; [] hides every GPU)."""

    nproc: int
    use_gpus: bool  # the torchrun runs use NCCL, one GPU per rank
    plain_gpus: list[str]
    torchrun_gpus: list[str]
    # Each two-node agent's GPU (None: both on the CPU).
    node_gpus: list[str] | None
    note: str | None = None


def choose_devices(device: str, gpu_ids: Sequence[str], nproc: int | None) -> DevicePlan:
    """GPUs when there are enough for one per rank (NCCL), else Gloo on the CPU.

    The plain runs (original, group of one) use the first GPU when there is one, as the
    user's single-GPU run would; `--device cpu` hides every GPU from every run."""
    gpus = list(gpu_ids) if device != "cpu" else []
    if device == "cuda" and not gpus:
        raise DeviceError("--device cuda: no GPU is visible (CUDA_VISIBLE_DEVICES, nvidia-smi)")
    processes = nproc or (len(gpus) if len(gpus) >= 2 else CPU_NPROC)
    if len(gpus) >= processes:
        return DevicePlan(processes, True, gpus[:1], gpus[:processes], gpus[:2])
    if device == "cuda":
        raise DeviceError(f"--device cuda: {processes} ranks need {processes} GPUs (one per rank, NCCL); "
                          f"{len(gpus)} visible")
    note = None
    if gpus:
        note = (f"{len(gpus)} GPU(s) for {processes} ranks: the plain runs use GPU {gpus[0]}, "
                "the torchrun runs use Gloo on the CPU (NCCL needs a GPU per rank)")
    return DevicePlan(processes, False, gpus[:1], [], None, note)


@dataclass
class Report:
    original: str
    migrated: str
    nproc: int
    use_gpus: bool
    settings: RunSettings
    runs: dict[str, RunResult]
    checks: list[CheckResult]
    seconds: float
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(check.status != FAIL for check in self.checks)


def visible_gpu_ids() -> list[str]:
    """GPU ids without importing torch here (start-up time): CUDA_VISIBLE_DEVICES or nvidia-smi."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [device.strip() for device in visible.split(",") if device.strip() and device.strip() != "-1"]
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(index) for index, line in enumerate(listing.splitlines()) if line.startswith("GPU ")]


def has_main_guard(path: str) -> bool:
    """Whether the script keeps its work under `if __name__ == "__main__":`, so importing
    it should run nothing."""
    from ddpify.files import SourceError, read_source

    try:
        tree = ast.parse(read_source(path).text)
    except (SourceError, SyntaxError, ValueError):
        return False
    return main_guarded(tree)


def ordered_checks(requested: Sequence[str]) -> list[str]:
    """The requested checks in report order; `runs` is always one of them."""
    return [check_id for check_id in CHECK_IDS if check_id in requested or check_id == "runs"]


def verify(
    original: str,
    migrated: str,
    settings: RunSettings,
    checks: Sequence[str] = default_checks("ddp"),
    nproc: int | None = None,
    keep_temp: bool = False,
    on_run: Callable[[RunResult], None] = lambda run: None,
    device: str = "auto",
    gpu_ids: Sequence[str] | None = None,
    roots: dict[str, str] | None = None,
) -> Report:
    """roots maps the original and the migrated entry script to their project folders,
    for a multi-file project; a script without one runs alone."""
    started = time.time()
    plan = choose_devices(device, visible_gpu_ids() if gpu_ids is None else gpu_ids, nproc)
    check_ids = ordered_checks(checks)
    needed = runs_needed(check_ids)
    runs = RunSet(slow_writes=settings.slow_writes)
    notes = [plan.note] if plan.note else []

    def record(run: RunResult) -> RunResult:
        runs[run.name] = run
        on_run(run)
        return run

    with Runner(settings, keep=keep_temp, roots=roots) as runner:
        if keep_temp:
            notes.append(f"run directories kept in {runner.root}")
        plain = [(name, script) for name, script in ((ORIGINAL, original), (SINGLE, migrated)) if name in needed]
        for run in runner.run_plain_together(plain, gpus=plan.plain_gpus):
            record(run)
        if TORCHRUN in needed:
            torchrun = record(runner.run_torchrun(TORCHRUN, migrated, plan.nproc, plan.torchrun_gpus))
            if "handoff" in check_ids:
                launch_handoff(runner, runs, torchrun, migrated, plan, record)
        if MULTINODE in needed:
            record(runner.run_multinode(MULTINODE, migrated, plan.node_gpus))
        if IMPORT in needed:
            if not has_main_guard(migrated):
                runs.skipped[IMPORT] = ("no `if __name__ == \"__main__\":` guard, so importing the "
                                        "script would run it")
            elif not record(runner.run_plain(IMPORT, migrated, gpus=plan.plain_gpus, import_only=True)).ok:
                record(runner.run_plain(ORIGINAL_IMPORT, original, gpus=plan.plain_gpus, import_only=True))
    return Report(
        original=original,
        migrated=migrated,
        nproc=plan.nproc,
        use_gpus=plan.use_gpus,
        settings=settings,
        runs=dict(runs),
        checks=evaluate(runs, check_ids),
        seconds=time.time() - started,
        notes=notes,
    )


def launch_handoff(runner: Runner, runs: RunSet, torchrun: RunResult, migrated: str, plan: DevicePlan,
                   record: Callable[[RunResult], RunResult]) -> None:
    """The torchrun run once more with rank 0's writes of the handed-off files delayed,
    when another rank reads a file rank 0 writes and the first run did not already show
    the read coming too early."""
    if not torchrun.ok:
        runs.skipped[HANDOFF] = "not checked: the torchrun run failed (see runs)"
        return
    paths = handoff_paths(torchrun)
    if paths and not early_reads(torchrun):
        record(runner.run_torchrun(HANDOFF, migrated, plan.nproc, plan.torchrun_gpus, slow_paths=paths))
