"""The `no_move_after_wrap` check: no .to()/.cuda()/.cpu() on a DDP model after the wrap."""
from __future__ import annotations

from ddpify.verify.checks.events import events_of
from ddpify.verify.checks.result import FAIL, PASS, CheckResult, at, na
from ddpify.verify.run_set import TORCHRUN, Runs, unusable


def check_no_move_after_wrap(runs: Runs) -> CheckResult:
    """On a GPU, .to()/.cpu() on a DDP model after the wrap moves parameters out from under
    DDP's gradient buckets; on the CPU it changes nothing visible, so it is caught here."""
    check_id, title = "no_move_after_wrap", "no move after wrap"
    run = runs.get(TORCHRUN)
    if run is None:
        return na(check_id, title, "not checked: the torchrun run was not requested")
    problems, seen = [], set()
    for rank, rank_events in sorted(run.events.items()):
        for event in events_of(rank_events, "move_after_wrap"):
            key = (event["method"], event.get("where"))
            if key not in seen:
                seen.add(key)
                target = ("the DDP model" if event["module"] == "DistributedDataParallel"
                          else f"{event['module']}, the module DDP wraps,")
                problems.append(f".{event['method']}() on {target} after the wrap{at(event)} on rank {rank}: "
                                "move the model to its device before DDP(...), never after")
    if problems:
        return CheckResult(check_id, title, FAIL, problems[0], problems)
    reason = unusable(runs, TORCHRUN)
    if reason:
        return na(check_id, title, reason)
    wraps = [event for event in events_of(run.events.get(0, []), "wrap")]
    if not wraps:
        return na(check_id, title, "no DistributedDataParallel was built")
    return CheckResult(check_id, title, PASS,
                       f"no .to()/.cuda()/.cpu() on a wrapped model after its wrap{at(wraps[0])}")
