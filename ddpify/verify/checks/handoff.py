"""The `handoff` check: a file rank 0 writes is read by other ranks only after it is written.

Also the source of the files a hand-off run slows down, and of the early reads that the
`runs` check names as the cause of a failed run.
"""
from __future__ import annotations

from collections import defaultdict

from ddpify.verify.checks.events import capped, events_of, user_writes
from ddpify.verify.checks.failed_runs import describe_failed_run
from ddpify.verify.checks.result import FAIL, PASS, CheckResult, examples, na
from ddpify.verify.records import RunResult
from ddpify.verify.run_set import HANDOFF, TORCHRUN, Runs, skipped_reason, unusable

NEVER = float("inf")


def rank0_writes_by_path(run: RunResult) -> dict[str, list[dict]]:
    """Rank 0's writes of each file with when they began (t) and ended (t_done): a file
    opened for writing counts as written when opened; a torch.save when its `saved` event
    came, never if the process died first."""
    writes: dict[str, list[dict]] = defaultdict(list)
    user = {id(event) for event in user_writes(run.events.get(0, []))}
    for event in run.events.get(0, []):
        if id(event) in user and event.get("abs") and event.get("t") is not None:
            done = event["t"] if event["ev"] == "write" else event.get("t_done", NEVER)
            writes[event["abs"]].append(dict(event, t_done=done))
        elif event["ev"] == "saved":
            pending = [write for write in writes.get(event["abs"], []) if write["t_done"] == NEVER]
            if pending:
                pending[-1]["t_done"] = event["t_done"]
    return writes


def handed_off_reads(run: RunResult) -> list[tuple[int, dict, list[dict]]]:
    """(rank, read, rank 0's writes of that file) for every read by another rank of a file
    that rank 0 writes in the same run."""
    writes = rank0_writes_by_path(run)
    found = []
    for rank, rank_events in sorted(run.events.items()):
        if rank == 0:
            continue
        for event in events_of(rank_events, "read"):
            if event.get("abs") in writes and event.get("t") is not None:
                found.append((rank, event, writes[event["abs"]]))
    return found


def handoff_paths(run: RunResult) -> list[str]:
    """Files rank 0 writes and another rank reads: the ones the hand-off run writes late."""
    return sorted({run.relative(read["abs"]) for _, read, _ in handed_off_reads(run)})


def early_reads(run: RunResult) -> list[str]:
    """Reads that happened before rank 0 finished writing the file (before its first write
    completed, or while a write was under way): nothing made that rank wait."""
    problems, seen = [], set()
    # A failed torch.load is recorded twice (the open, then the error): the error comes first.
    for rank, read, writes in sorted(handed_off_reads(run), key=lambda found: "error" not in found[1]):
        moment = read["t"]
        pending = [write for write in writes if write["t"] <= moment < write["t_done"]]
        # Before rank 0's first write, a file the working copy already held is still there.
        existed = run.relative(read["abs"]) in run.copied and not read.get("error")
        before_all = not existed and all(write["t_done"] > moment for write in writes)
        if not (pending or before_all):
            continue
        key = (rank, read["abs"], read.get("where"))
        if key in seen:
            continue
        seen.add(key)
        write = (pending or writes)[0]
        failure = f": {read['error']}" if read.get("error") else ""
        problems.append(
            f"rank {rank} read {run.relative(read['abs'])} at {read.get('where') or 'an unknown line'} "
            f"before rank 0 finished writing it at {write.get('where') or 'an unknown line'} "
            f"(no barrier between them){failure}"
        )
    return problems


def check_handoff(runs: Runs) -> CheckResult:
    """A file that one rank writes and another reads needs a barrier between the two. On an
    idle machine rank 0 usually wins the race, so the hand-off run delays rank 0's writes of
    those files: a reader that does not wait then reads too early, visibly."""
    check_id, title = "handoff", "hand-off"
    torchrun, late = runs.get(TORCHRUN), runs.get(HANDOFF)
    delay = getattr(runs, "slow_writes", 0.0)
    problems = early_reads(torchrun) if torchrun is not None else []
    if late is not None:
        problems += [f"{line} [hand-off run: rank 0's writes delayed {delay:g} s]"
                     for line in early_reads(late) if line not in problems]
    if problems:
        return CheckResult(check_id, title, FAIL, problems[0], problems)
    reason = unusable(runs, TORCHRUN)
    if reason:
        return na(check_id, title, reason)
    handed = handoff_paths(runs[TORCHRUN])
    if not handed:
        cap = capped(runs)
        return na(check_id, title, f"not exercised: {cap}" if cap
                  else "no file written by rank 0 is read by another rank")
    if late is None:
        return na(check_id, title, skipped_reason(runs, HANDOFF) or "the hand-off run was not launched")
    if not late.ok:
        return CheckResult(check_id, title, FAIL, f"the hand-off run (rank 0's writes delayed {delay:g} s) failed",
                           describe_failed_run(late))
    return CheckResult(check_id, title, PASS,
                       f"other ranks read {examples(handed)} only after rank 0 wrote it, "
                       f"also with rank 0's writes delayed {delay:g} s")
