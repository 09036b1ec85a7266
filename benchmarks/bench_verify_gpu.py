"""`ddpify verify` over every runnable fixture, timed: the check to run on a GPU machine.

    python benchmarks/bench_verify_gpu.py                      # all runnable fixtures, GPUs if present
    python benchmarks/bench_verify_gpu.py --device cpu -j 2    # the same on the CPU (Gloo)
    python benchmarks/bench_verify_gpu.py --cases guide_image_classifier,mnist_style_main --json out.json

Each fixture with a run.json is verified as `ddpify verify input.py -o expected.py` (the
migration the fixture pins, used as is: nothing is written into fixtures/), with the
fixture's arguments. On a machine with one GPU per rank the torchrun runs use NCCL; with
one GPU the plain runs use it and the torchrun runs use Gloo on the CPU; `--device cuda`
fails a case unless there is a GPU per rank. Several cases run at once (-j), each verify
in its own process. Prints a table (case, exit status, seconds, the checks that failed),
the wall time against the budget (8 minutes), and exits 1 if a case fails or the budget is
exceeded.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import List, Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "fixtures")
BUDGET_S = 8 * 60


@dataclass
class Case:
    name: str
    script: str
    migrated: str
    args: List[str]


@dataclass
class Outcome:
    case: str
    status: int
    seconds: float
    failed: List[str]
    device: str


def runnable_cases(fixtures: str = FIXTURES, selected: Optional[Sequence[str]] = None) -> List[Case]:
    """Fixtures that have a run.json, an input.py and an expected.py, in name order."""
    cases = []
    for name in sorted(os.listdir(fixtures)):
        folder = os.path.join(fixtures, name)
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


def verify_argv(case: Case, device: str, report: str, timeout: float) -> List[str]:
    return [
        sys.executable, "-m", "ddpify.verify", case.script, "-o", case.migrated,
        "--device", device, "--timeout", f"{timeout:g}", "--json", report, "--", *case.args,
    ]


def run_case(case: Case, device: str, scratch: str, timeout: float) -> Outcome:
    report = os.path.join(scratch, f"{case.name}.json")
    started = time.time()
    completed = subprocess.run(verify_argv(case, device, report, timeout), cwd=scratch,
                               capture_output=True, text=True)
    seconds = time.time() - started
    failed, used = [], "?"
    if os.path.exists(report):
        with open(report, encoding="utf-8") as handle:
            data = json.load(handle)
        failed = [check["id"] for check in data["checks"] if check["status"] == "fail"]
        used = data["device"]
    elif completed.returncode:
        failed = [(completed.stdout + completed.stderr).strip().splitlines()[-1:][0][:80]
                  if (completed.stdout + completed.stderr).strip() else "no report"]
    return Outcome(case.name, completed.returncode, seconds, failed, used)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--cases", help="comma-separated fixture names [default: every runnable fixture]")
    parser.add_argument("-j", "--jobs", type=int, default=max(1, min(4, (os.cpu_count() or 2) // 4)),
                        help="cases verified at once [default: cores/4, at most 4]")
    parser.add_argument("--timeout", type=float, default=120, help="seconds per run (verify --timeout)")
    parser.add_argument("--json", help="write the outcomes here")
    options = parser.parse_args(argv)
    cases = runnable_cases(selected=options.cases.split(",") if options.cases else None)
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="bench-verify-") as scratch:
        with ThreadPoolExecutor(max_workers=options.jobs) as pool:
            outcomes = list(pool.map(lambda case: run_case(case, options.device, scratch, options.timeout), cases))
    wall = time.time() - started
    width = max(len(case.name) for case in cases)
    for outcome in outcomes:
        print(f"{outcome.case:<{width}}  exit {outcome.status}  {outcome.seconds:6.1f}s  {outcome.device:<4}  "
              f"{', '.join(outcome.failed) or '-'}")
    failures = [outcome for outcome in outcomes if outcome.status != 0]
    print(f"{len(cases)} fixtures, {len(failures)} failing, {wall:.0f}s wall with -j {options.jobs} "
          f"(budget {BUDGET_S}s)")
    if options.json:
        with open(options.json, "w", encoding="utf-8") as handle:
            json.dump({"wall_s": wall, "jobs": options.jobs, "device": options.device,
                       "outcomes": [outcome.__dict__ for outcome in outcomes]}, handle, indent=2)
    return 1 if failures or wall > BUDGET_S else 0


if __name__ == "__main__":
    sys.exit(main())
