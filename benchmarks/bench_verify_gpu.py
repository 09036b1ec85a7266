"""`ddpify verify`'s GPU path in one command, for a machine with GPUs: one table, under 5 minutes.

    python benchmarks/bench_verify_gpu.py                 # the GPU cases; a clear SKIP without a GPU
    python benchmarks/bench_verify_gpu.py --device cpu    # the same cases on the CPU (Gloo)
    python benchmarks/bench_verify_gpu.py --cases all -j 8 --json out.json   # every runnable fixture

Each case is a fixture with a run.json, verified as `ddpify verify input.py -o expected.py`
(the migration the fixture pins, used as is: nothing is written into fixtures/) with the
fixture's arguments, in its own process; -j cases run at once. The default cases are the
fixtures whose GPU path differs from their CPU one (autocast and GradScaler, SyncBatchNorm,
pin_memory and non_blocking, device strings, checkpoints moved to the CPU, a reload of
rank 0's save), plus the guide's script.

What runs where depends on the GPUs visible (CUDA_VISIBLE_DEVICES, else nvidia-smi):

* two or more: NCCL, one GPU per rank (`--device cuda --nproc 2`); case i gets GPUs 2i and
  2i+1 (mod the count), so cases at once do not share a GPU where there are enough;
* one: NCCL cannot put two ranks on one GPU, so the NCCL runs are skipped, said in the
  table's title: the plain runs (original, group of one) use the GPU and torchrun runs
  Gloo on the CPU (`--device auto`);
* none: SKIP, nothing is run, exit 0 (`--device cpu` runs the same cases on the CPU).

The table has a row per case: exit status, seconds, where the plain runs and the torchrun
run went (`cuda`/`cpu`, and the process-group backend the ranks really started, read from
the report: `nccl` proves the GPU path), and the checks that failed. The last line gives the
wall time against the budget. Exit 1 if a case fails or the budget is exceeded.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "fixtures")
sys.path.insert(0, ROOT)

from ddpify.verify.session import visible_gpu_ids  # noqa: E402

BUDGET_S = 5 * 60
GPU_CASES = (
    "guide_image_classifier", "amp_clip_accumulation", "batchnorm_sync_option", "device_string_comparisons",
    "checkpoint_moves_model_to_cpu", "reload_checkpoint_after_save", "mnist_style_main",
)


@dataclass
class Case:
    name: str
    script: str
    migrated: str
    args: list[str]


@dataclass
class Outcome:
    case: str
    status: int
    seconds: float
    failed: list[str]
    # Where the runs went: "cpu", "cuda", or the backend the ranks started ("nccl", "gloo").
    plain: str
    torchrun: str


@dataclass(frozen=True)
class Mode:
    """How the cases run on this machine, and the table's title saying so."""

    device: str  # verify's --device
    title: str
    gpus: list[str]
    skip: bool = False


def choose_mode(device: str, gpus: Sequence[str]) -> Mode:
    gpus = list(gpus)
    if device == "cpu":
        return Mode("cpu", "CPU: every run on the CPU, torchrun with Gloo (--device cpu)", [])
    if len(gpus) >= 2:
        return Mode("cuda", f"{len(gpus)} GPUs: torchrun with NCCL, one GPU per rank", gpus)
    if device == "cuda" or not gpus:
        reason = "no GPU visible (CUDA_VISIBLE_DEVICES, nvidia-smi)" if not gpus else \
            "1 GPU visible: NCCL needs one GPU per rank"
        return Mode("cuda", f"SKIP: {reason}; --device cpu runs the same cases on the CPU", gpus, skip=True)
    return Mode("auto", f"1 GPU: NCCL SKIPPED (it needs one GPU per rank); plain runs on GPU {gpus[0]}, "
                        "torchrun with Gloo on the CPU", gpus)


def runnable_cases(fixtures: str = FIXTURES, selected: Sequence[str] | None = None) -> list[Case]:
    """Fixtures (fixtures/<family>/<idiom>/) that have a run.json, an input.py and an
    expected.py, in idiom order; a case is named by its idiom."""
    cases = []
    folders = [os.path.join(fixtures, family, name) for family in os.listdir(fixtures)
               if os.path.isdir(os.path.join(fixtures, family))
               for name in os.listdir(os.path.join(fixtures, family))]
    for folder in sorted(folders, key=os.path.basename):
        name = os.path.basename(folder)
        paths = [os.path.join(folder, file) for file in ("run.json", "input.py", "expected.py")]
        if selected and name not in selected or not all(map(os.path.isfile, paths)):
            continue
        with open(paths[0], encoding="utf-8") as run_json:
            arguments = json.load(run_json).get("args", [])
        cases.append(Case(name, paths[1], paths[2], list(arguments)))
    unknown = sorted(set(selected or ()) - {case.name for case in cases})
    if unknown:
        raise SystemExit(f"not runnable fixtures: {', '.join(unknown)}")
    return cases


def verify_argv(case: Case, device: str, report: str, timeout: float) -> list[str]:
    nproc = ["--nproc", "2"] if device == "cuda" else []
    return [
        sys.executable, "-m", "ddpify.verify", case.script, "-o", case.migrated,
        "--device", device, *nproc, "--timeout", f"{timeout:g}", "--json", report, "--", *case.args,
    ]


def case_gpus(mode: Mode, index: int) -> str | None:
    """CUDA_VISIBLE_DEVICES for the index-th case: a pair of its own while pairs last."""
    if mode.device != "cuda" or len(mode.gpus) < 2:
        return None
    first = (2 * index) % len(mode.gpus)
    return ",".join([mode.gpus[first], mode.gpus[(first + 1) % len(mode.gpus)]])


def where_runs_went(report: dict, name: str) -> str:
    run = next((run for run in report["runs"] if run["name"] == name), None)
    if run is None:
        return "-"
    return ",".join(run.get("backends") or ["no group"])


def run_case(case: Case, mode: Mode, index: int, scratch: str, timeout: float) -> Outcome:
    report_path = os.path.join(scratch, f"{case.name}.json")
    env = dict(os.environ)
    gpus = case_gpus(mode, index)
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpus
    started = time.time()
    completed = subprocess.run(verify_argv(case, mode.device, report_path, timeout), cwd=scratch, env=env,
                               capture_output=True, text=True)
    seconds = time.time() - started
    if not os.path.exists(report_path):
        output = (completed.stdout + completed.stderr).strip().splitlines()
        return Outcome(case.name, completed.returncode, seconds, [output[-1][:80] if output else "no report"], "?", "?")
    with open(report_path, encoding="utf-8") as handle:
        report = json.load(handle)
    plain = "cpu" if mode.device == "cpu" or not mode.gpus else "cuda"
    failed = [check["id"] for check in report["checks"] if check["status"] == "fail"]
    return Outcome(case.name, completed.returncode, seconds, failed, plain, where_runs_went(report, "torchrun"))


def render(mode: Mode, outcomes: list[Outcome], wall: float, jobs: int) -> str:
    header = ("case", "exit", "seconds", "plain", "torchrun", "failed checks")
    rows = [(outcome.case, str(outcome.status), f"{outcome.seconds:.1f}", outcome.plain, outcome.torchrun,
             ", ".join(outcome.failed) or "-") for outcome in outcomes]
    widths = [max(len(row[column]) for row in (header, *rows)) for column in range(len(header))]
    lines = [f"ddpify verify, GPU path: {mode.title}"]
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in (header, *rows)]
    failures = sum(outcome.status != 0 for outcome in outcomes)
    lines.append(f"{len(outcomes)} cases, {failures} failing, {wall:.0f}s wall with -j {jobs} (budget {BUDGET_S}s)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="cpu: the CPU path; cuda: SKIP unless there is a GPU per rank [default: auto]")
    parser.add_argument("--cases", help="comma-separated fixture names, or all [default: the GPU cases]")
    parser.add_argument("-j", "--jobs", type=int, default=max(1, min(4, (os.cpu_count() or 2) // 4)),
                        help="cases verified at once [default: cores/4, at most 4]")
    parser.add_argument("--timeout", type=float, default=90, help="seconds per run (verify --timeout)")
    parser.add_argument("--json", help="write the outcomes here")
    options = parser.parse_args(argv)
    mode = choose_mode(options.device, visible_gpu_ids())
    if mode.skip:
        print(f"ddpify verify, GPU path: {mode.title}")
        return 0
    selected = None if options.cases == "all" else (options.cases.split(",") if options.cases else list(GPU_CASES))
    cases = runnable_cases(selected=selected)
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="bench-verify-") as scratch, \
            ThreadPoolExecutor(max_workers=options.jobs) as pool:
        outcomes = list(pool.map(lambda item: run_case(item[1], mode, item[0], scratch, options.timeout),
                                 enumerate(cases)))
    wall = time.time() - started
    print(render(mode, outcomes, wall, options.jobs))
    if options.json:
        with open(options.json, "w", encoding="utf-8") as handle:
            json.dump({"wall_s": wall, "jobs": options.jobs, "mode": mode.title,
                       "outcomes": [outcome.__dict__ for outcome in outcomes]}, handle, indent=2)
    return 1 if any(outcome.status != 0 for outcome in outcomes) or wall > BUDGET_S else 0


if __name__ == "__main__":
    sys.exit(main())
