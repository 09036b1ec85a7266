"""The `importable` check: importing the migrated script runs no training and raises nothing."""
from __future__ import annotations

from ddpify.verify.checks.events import events_of
from ddpify.verify.checks.result import FAIL, PASS, CheckResult, at, na
from ddpify.verify.records import RunResult
from ddpify.verify.run_set import IMPORT, ORIGINAL_IMPORT, Runs, skipped_reason


def import_failure(run: RunResult) -> str | None:
    if run.timed_out:
        return f"importing did not finish within {run.limit:g} s"
    for event in events_of(run.events.get(0, []), "end"):
        if event.get("status") not in (0, None):
            return f"{event.get('error', 'exit status ' + str(event['status']))}{at(event)}"
    if not run.ok:
        return f"exit status {', '.join(map(str, run.returncodes))}"
    return None


def check_importable(runs: Runs) -> CheckResult:
    """`import train_ddp` (tests, notebooks, tools) must run no training and raise no
    NameError: the migration must not put code that needs main()'s names at module level."""
    check_id, title = "importable", "importable"
    run = runs.get(IMPORT)
    if run is None:
        return na(check_id, title, skipped_reason(runs, IMPORT) or "not checked: the import was not requested")
    failure = import_failure(run)
    if failure:
        original = runs.get(ORIGINAL_IMPORT)
        original_failure = import_failure(original) if original is not None else None
        if original_failure:
            return na(check_id, title, f"the original does not import either: {original_failure}")
        return CheckResult(check_id, title, FAIL, f"importing the migrated script fails: {failure}",
                           [f"importing the migrated script fails: {failure}", "the original imports cleanly"])
    starts = events_of(run.events.get(0, []), "init_pg")
    if starts:
        return CheckResult(check_id, title, FAIL,
                           f"importing the migrated script starts a process group{at(starts[0])}")
    return CheckResult(check_id, title, PASS, "imports without running: no error, no process group started")
