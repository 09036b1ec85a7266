"""The `ranks_agree` check: after every optimizer step all ranks hold the same parameters.

Bit-identical parameters on every rank are what DDP's gradient all-reduce promises; a
model that is not wrapped, or is wrapped after a step, drifts apart from the first step.
"""
from __future__ import annotations

from ddpify.verify.checks.events import events_of
from ddpify.verify.checks.result import FAIL, PASS, CheckResult, na
from ddpify.verify.records import RunResult
from ddpify.verify.run_set import TORCHRUN, Runs, unusable


def ranks_agree_on(runs: Runs, run: RunResult) -> CheckResult:
    check_id, title = "ranks_agree", "ranks agree"
    steps_per_rank = {rank: events_of(rank_events, "step") for rank, rank_events in sorted(run.events.items())}
    if len(steps_per_rank) < 2:
        return na(check_id, title, "fewer than two ranks recorded")
    counts = {rank: len(steps) for rank, steps in steps_per_rank.items()}
    if not any(counts.values()):
        return na(check_id, title, "no optimizer.step() observed")
    if len(set(counts.values())) > 1:
        detail = ", ".join(f"rank {rank}: {count}" for rank, count in counts.items())
        return CheckResult(check_id, title, FAIL, f"ranks made different numbers of steps ({detail})")
    for step_events in zip(*steps_per_rank.values()):
        if len({event["digest"] for event in step_events}) > 1:
            detail = ", ".join(
                f"rank {rank}: {event['checksum']:.10g}" for rank, event in zip(steps_per_rank, step_events)
            )
            return CheckResult(
                check_id, title, FAIL,
                f"parameters differ between ranks after step {step_events[0]['n']} (is the model wrapped in DDP?)",
                [f"parameter sums after step {step_events[0]['n']}: {detail}"],
            )
    steps = next(iter(counts.values()))
    return CheckResult(
        check_id, title, PASS, f"parameters bit-identical on {len(counts)} ranks after each of {steps} steps"
    )


def check_ranks_agree(runs: Runs) -> CheckResult:
    reason = unusable(runs, TORCHRUN)
    return na("ranks_agree", "ranks agree", reason) if reason else ranks_agree_on(runs, runs[TORCHRUN])
