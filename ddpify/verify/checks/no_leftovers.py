"""The `no_leftovers` check: no process a run started outlives it."""
from __future__ import annotations

from ddpify.verify.checks.result import FAIL, PASS, CheckResult, na
from ddpify.verify.run_set import RUN_TITLES, Runs


def check_no_leftovers(runs: Runs) -> CheckResult:
    """Every process a run starts ends with it: a server or worker left running holds
    ports, memory and GPUs on the user's machine after training is over."""
    check_id, title = "no_leftovers", "no processes left"
    problems = []
    for run in runs.values():
        for leftover in run.leftovers:
            rank = "" if leftover.get("rank") is None else f" by rank {leftover['rank']}"
            problems.append(f"{RUN_TITLES.get(run.name, run.name)}: a process started{rank} was still running "
                            f"after the run ended (pid {leftover['pid']}: {leftover.get('cmdline') or '?'}); "
                            "verify killed it")
    if problems:
        return CheckResult(check_id, title, FAIL, problems[0], problems)
    finished = [run for run in runs.values() if not run.timed_out]
    if not finished:
        return na(check_id, title, "no run finished")
    return CheckResult(check_id, title, PASS, f"no process outlived its run ({len(finished)} runs)")
