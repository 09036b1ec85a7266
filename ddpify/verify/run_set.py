"""The runs of one verification: their names, and which of them a check can look at.

Runs are named ORIGINAL (`python train.py`), SINGLE (`python train_ddp.py`, a group of
one), TORCHRUN (`torchrun --standalone --nproc_per_node=N train_ddp.py`) and MULTINODE
(two torchrun agents, one process each). The session launches them by these names and
the checks judge them by the same names, so the names live apart from both. A check whose
runs are missing or failed is n/a: the failure is reported once, by the `runs` check.
"""
from __future__ import annotations

from collections.abc import Mapping

from ddpify.verify.records import RunResult

ORIGINAL, SINGLE, TORCHRUN, MULTINODE = "original", "single", "torchrun", "multinode"
# Launched only when a check asks for them and the other runs say they can tell something.
HANDOFF, IMPORT, ORIGINAL_IMPORT = "handoff", "import", "original_import"
ALL_RUNS = (ORIGINAL, SINGLE, TORCHRUN, MULTINODE)
RUN_TITLES = {
    ORIGINAL: "original",
    SINGLE: "group of one",
    TORCHRUN: "torchrun",
    MULTINODE: "two nodes",
    HANDOFF: "hand-off run",
    IMPORT: "import",
    ORIGINAL_IMPORT: "original import",
}

Runs = Mapping[str, RunResult]


class RunSet(dict):
    """The runs of one verification, and why runs that were not launched were left out."""

    def __init__(self, runs: Mapping[str, RunResult] | None = None, skipped: dict[str, str] | None = None,
                 slow_writes: float = 0.0):
        super().__init__(runs or {})
        self.skipped = dict(skipped or {})
        self.slow_writes = slow_writes


def skipped_reason(runs: Runs, name: str) -> str | None:
    return getattr(runs, "skipped", {}).get(name)


def unusable(runs: Runs, *names: str) -> str | None:
    """Why a check cannot look at these runs, or None when all of them completed."""
    for name in names:
        if name not in runs:
            return f"not checked: the {RUN_TITLES[name]} run was not requested"
        if not runs[name].ok:
            return f"not checked: the {RUN_TITLES[name]} run failed (see runs)"
    return None


def usable(runs: Runs, name: str) -> RunResult | None:
    run = runs.get(name)
    return run if run is not None and run.ok else None
