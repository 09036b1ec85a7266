"""The verdicts: pure functions from recorded runs to pass / fail / n/a with evidence.

One module per check, named after the check's id; this module is the registry: which
checks there are, the runs each one looks at, and the order they are reported in. The run
names are in ddpify.verify.run_set, the result type in ddpify.verify.checks.result.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ddpify.verify.checks.data_sharded import check_data_sharded
from ddpify.verify.checks.full_checkpoint import check_full_checkpoint
from ddpify.verify.checks.handoff import check_handoff
from ddpify.verify.checks.importable import check_importable
from ddpify.verify.checks.multinode_ready import check_multinode_ready
from ddpify.verify.checks.no_leftovers import check_no_leftovers
from ddpify.verify.checks.no_move_after_wrap import check_no_move_after_wrap
from ddpify.verify.checks.one_voice import check_one_voice
from ddpify.verify.checks.one_writer import check_one_writer
from ddpify.verify.checks.optimizer_sharded import check_optimizer_sharded
from ddpify.verify.checks.params_sharded import check_params_sharded
from ddpify.verify.checks.ranks_agree import check_ranks_agree
from ddpify.verify.checks.result import CheckResult
from ddpify.verify.checks.runs import check_runs
from ddpify.verify.checks.same_as_original import check_same_as_original
from ddpify.verify.run_set import ALL_RUNS, IMPORT, MULTINODE, ORIGINAL, SINGLE, TORCHRUN, Runs

FSDP2_ONLY = frozenset({"fsdp2"})


@dataclass(frozen=True)
class Check:
    id: str
    title: str
    needs: frozenset[str]
    function: Callable[[Runs], CheckResult]
    # The targets (`--strategy`) whose migrations the check applies to by default.
    strategies: frozenset[str] = frozenset({"ddp", "fsdp2"})


CHECKS = (
    Check("runs", "runs", frozenset(), check_runs),
    Check("same_as_original", "same as original", frozenset({ORIGINAL, SINGLE}), check_same_as_original),
    Check("ranks_agree", "ranks agree", frozenset({TORCHRUN}), check_ranks_agree),
    Check("data_sharded", "data sharded", frozenset({TORCHRUN}), check_data_sharded),
    Check("one_writer", "one writer", frozenset({TORCHRUN}), check_one_writer),
    Check("one_voice", "one voice", frozenset({ORIGINAL, TORCHRUN}), check_one_voice),
    Check("handoff", "hand-off", frozenset({TORCHRUN}), check_handoff),
    Check("no_move_after_wrap", "no move after wrap", frozenset({TORCHRUN}), check_no_move_after_wrap),
    Check("importable", "importable", frozenset({IMPORT}), check_importable),
    Check("no_leftovers", "no processes left", frozenset({TORCHRUN}), check_no_leftovers),
    Check("multinode_ready", "multi-node ready", frozenset({MULTINODE}), check_multinode_ready),
    Check("params_sharded", "parameters sharded", frozenset({TORCHRUN}), check_params_sharded, FSDP2_ONLY),
    Check("optimizer_sharded", "optimizer sees the shards", frozenset({TORCHRUN}), check_optimizer_sharded,
          FSDP2_ONLY),
    Check("full_checkpoint", "full checkpoint", frozenset({ORIGINAL, TORCHRUN}), check_full_checkpoint, FSDP2_ONLY),
)
CHECK_IDS = tuple(check.id for check in CHECKS)


def default_checks(strategy: str) -> tuple[str, ...]:
    return tuple(check.id for check in CHECKS if strategy in check.strategies)


def runs_needed(check_ids: list[str]) -> list[str]:
    """The runs the chosen checks look at, in launch order; all of them for `runs` alone."""
    needed = set().union(*(check.needs for check in CHECKS if check.id in check_ids))
    order = (*ALL_RUNS, IMPORT)
    return [name for name in order if name in needed] if needed else list(order)


def evaluate(runs: Runs, check_ids: list[str]) -> list[CheckResult]:
    return [check.function(runs) for check in CHECKS if check.id in check_ids]
