"""The `params_sharded` check (--strategy fsdp2): each rank holds only its share of the
parameters the optimizer steps, and the ranks' shares add up to the whole, once.

A model never given to fully_shard, or a part of it left out, is whole on every rank: it
trains (as DDP would without its all-reduce) and keeps all the memory FSDP2 was for.
"""
from __future__ import annotations

from ddpify.verify.checks.events import events_of
from ddpify.verify.checks.result import FAIL, PASS, CheckResult, na
from ddpify.verify.run_set import TORCHRUN, Runs, unusable

CHECK_ID, TITLE = "params_sharded", "parameters sharded"


def first_shards(rank_events: list[dict]) -> dict[int, dict]:
    """Each optimizer's `shards` event (the probe records one, at its first step), by optimizer."""
    return {event["optimizer"]: event for event in reversed(events_of(rank_events, "shards"))}


def check_params_sharded(runs: Runs) -> CheckResult:
    reason = unusable(runs, TORCHRUN)
    if reason:
        return na(CHECK_ID, TITLE, reason)
    run = runs[TORCHRUN]
    if not any(events_of(rank_events, "shard") for rank_events in run.events.values()):
        return CheckResult(CHECK_ID, TITLE, FAIL, "fully_shard was never called: every rank holds the whole model")
    by_rank = {rank: first_shards(rank_events) for rank, rank_events in sorted(run.events.items())}
    optimizers = sorted({optimizer for shards in by_rank.values() for optimizer in shards})
    if not optimizers:
        return na(CHECK_ID, TITLE, "no optimizer.step() observed")
    problems, shares = [], []
    for optimizer in optimizers:
        events = {rank: shards[optimizer] for rank, shards in by_rank.items() if optimizer in shards}
        full = next(iter(events.values()))["full_numel"]
        held = {rank: event["local_numel"] for rank, event in events.items()}
        label = f"optimizer {optimizer}" if len(optimizers) > 1 else "the optimizer"
        whole = [rank for rank, numel in held.items() if numel >= full and full > 0]
        if whole:
            problems.append(f"rank {whole[0]} holds all {full:,} numbers of the parameters {label} steps: "
                            "they are not sharded (is every trained module given to fully_shard?)")
        elif sum(held.values()) != full:
            problems.append(f"the ranks hold {sum(held.values()):,} numbers of the {full:,} that {label} steps: "
                            "some parameters are kept whole on every rank")
        shares.append(f"{label}: " + ", ".join(f"rank {rank} {numel / full:.0%}" for rank, numel in held.items())
                      + f" of {full:,} numbers")
    if problems:
        return CheckResult(CHECK_ID, TITLE, FAIL, problems[0], problems + shares)
    return CheckResult(CHECK_ID, TITLE, PASS, "; ".join(shares))
