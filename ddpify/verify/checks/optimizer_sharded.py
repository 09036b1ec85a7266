"""The `optimizer_sharded` check (--strategy fsdp2): the optimizer steps the sharded
parameters, the ones the model computes with after fully_shard.

fully_shard replaces every parameter of the module it is given with a DTensor shard. An
optimizer built before that holds the replaced tensors: its steps change nothing the model
uses, and no error says so (the loss just stops improving).
"""
from __future__ import annotations

from ddpify.verify.checks.events import events_of
from ddpify.verify.checks.params_sharded import first_shards
from ddpify.verify.checks.result import FAIL, PASS, CheckResult, na
from ddpify.verify.run_set import TORCHRUN, Runs, unusable

CHECK_ID, TITLE = "optimizer_sharded", "optimizer sees the shards"


def check_optimizer_sharded(runs: Runs) -> CheckResult:
    reason = unusable(runs, TORCHRUN)
    if reason:
        return na(CHECK_ID, TITLE, reason)
    run = runs[TORCHRUN]
    if not any(events_of(rank_events, "shard") for rank_events in run.events.values()):
        return na(CHECK_ID, TITLE, "no module was given to fully_shard (see parameters sharded)")
    problems, seen = [], []
    for rank, rank_events in sorted(run.events.items()):
        for optimizer, event in sorted(first_shards(rank_events).items()):
            stale = event["params"] - event["in_sharded_modules"]
            if stale:
                problems.append(f"rank {rank}: {stale} of the {event['params']} tensors optimizer {optimizer} steps "
                                "are not parameters of the sharded model (built before fully_shard replaced them?)")
            elif event["dtensor_params"] < event["params"]:
                problems.append(f"rank {rank}: optimizer {optimizer} steps {event['params'] - event['dtensor_params']} "
                                "parameters that are not DTensor shards")
            seen.append(event)
    if problems:
        return CheckResult(CHECK_ID, TITLE, FAIL, problems[0], problems)
    if not seen:
        return na(CHECK_ID, TITLE, "no optimizer.step() observed")
    return CheckResult(CHECK_ID, TITLE, PASS, f"every optimizer steps the model's DTensor shards "
                       f"({seen[0]['params']} parameters on rank 0)")
