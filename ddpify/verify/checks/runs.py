"""The `runs` check: every run exited 0.

Other checks that find a failed run say n/a and point here, so a failure is told once;
the runs that a check launches for itself (hand-off, import) are judged by that check.
"""
from __future__ import annotations

from ddpify.verify.checks.events import capped, events_of
from ddpify.verify.checks.failed_runs import describe_failed_run, hung
from ddpify.verify.checks.handoff import early_reads
from ddpify.verify.checks.result import FAIL, PASS, CheckResult, na
from ddpify.verify.records import RunResult
from ddpify.verify.run_set import HANDOFF, IMPORT, ORIGINAL_IMPORT, RUN_TITLES, Runs

# Runs whose failure is their own check's finding, not a failure of `runs`.
JUDGED_BY_THEIR_CHECK = {HANDOFF: "hand-off", IMPORT: "importable", ORIGINAL_IMPORT: "importable"}


def check_runs(runs: Runs) -> CheckResult:
    title = "runs"
    judged = [run for name, run in runs.items() if name not in JUDGED_BY_THEIR_CHECK]
    failed = [run for run in judged if not run.ok]
    timings = ", ".join(f"{RUN_TITLES.get(run.name, run.name)} {run.seconds:.1f} s" for run in judged)
    cap = capped(runs)
    notes = [f"{cap}: code after training (final saves and prints, teardown) was not exercised, "
             "so one writer, one voice, hand-off and no processes left judge only what ran"] if cap else []
    if not judged:
        return na("runs", title, "nothing was run")
    if not failed:
        return CheckResult("runs", title, PASS, f"{len(judged)} runs exited 0 ({timings})", notes=notes)
    evidence = [line for run in failed for line in describe_failed_run(run)]
    if any(early_reads(run) for run in failed):
        evidence.append("a rank read a file before rank 0 finished writing it: see hand-off")
    hung_runs = [RUN_TITLES.get(run.name, run.name) for run in failed if hung(run)]
    if any(hung(run) and _epochs_cut(run) for run in failed):
        evidence.append("it hung after verify cut its epochs to one batch (--full-epochs): a loop that needs "
                        "more batches of an epoch to get on (`if i < skip: continue`, resuming mid-epoch) "
                        "never ends there; rerun with --full-epochs 0")
    summary = f"{len(failed)} of {len(judged)} runs failed" + (f"; hung: {', '.join(hung_runs)}" if hung_runs else "")
    return CheckResult("runs", title, FAIL, summary, evidence, notes)


def _epochs_cut(run: RunResult) -> bool:
    """verify cut a training loader's epochs to one batch in this run."""
    return any(event.get("cut") for rank_events in run.events.values() for event in events_of(rank_events, "iter"))
