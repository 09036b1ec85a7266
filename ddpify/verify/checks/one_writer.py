"""The `one_writer` check: only rank 0 writes the user's files, and saves what the
original saved (the unwrapped model's state_dict, not the DDP wrapper's).

N ranks writing one checkpoint race each other; a state_dict saved from the wrapper has
`module.` keys that the original's loading code no longer finds.
"""
from __future__ import annotations

from ddpify.verify.checks.events import (
    capped,
    events_of,
    first_write_of,
    own_dcp_shard,
    per_machine_preparation,
    user_writes,
    written_paths,
)
from ddpify.verify.checks.result import FAIL, PASS, CheckResult, at, examples, na
from ddpify.verify.records import RunResult
from ddpify.verify.run_set import ORIGINAL, TORCHRUN, Runs, unusable, usable


def one_writer_in(runs: Runs, run: RunResult) -> CheckResult:
    check_id, title = "one_writer", "one writer"
    problems, notes = [], []
    for rank, rank_events in sorted(run.events.items()):
        # dcp.save (--checkpoint dcp): each rank writes its own shard file, by design.
        paths = [path for path in written_paths(rank_events) if not own_dcp_shard(rank, path)]
        preparation = per_machine_preparation(rank_events) if rank != 0 else []
        if preparation:
            notes.append(f"rank {rank}, first on its machine, prepared data before training: "
                         f"{examples(preparation)}")
            paths = [path for path in paths if path not in preparation]
        if rank != 0 and paths:
            problems.append(f"rank {rank} wrote {examples(paths)}{at(first_write_of(rank_events, paths[0]))}")
        for event in events_of(rank_events, "save"):
            if event.get("path") and event.get("module_prefix"):
                problems.append(
                    f"rank {rank} saved {event['path']} with keys starting with 'module.'{at(event)} "
                    "(save the unwrapped model's state_dict)"
                )
            if event.get("path") and event.get("wrapped"):
                problems.append(f"rank {rank} saved the DDP wrapper itself to {event['path']}{at(event)}")
        outside = [event for event in user_writes(rank_events) if event.get("scope") in ("outside", "other")]
        for path in dict.fromkeys(event["path"] for event in outside):
            notes.append(f"rank {rank} wrote {path} outside the run directory"
                         f"{at(first_write_of(rank_events, path))}: every run of verify writes it there too")
    rank0_paths = written_paths(run.events.get(0, []))
    original = usable(runs, ORIGINAL)
    original_paths = written_paths(original.events.get(0, [])) if original else []
    if original_paths and not rank0_paths:
        problems.append(f"rank 0 wrote nothing; the original wrote {examples(original_paths)}")
    evidence = problems + notes + (
        [f"files left in the working directory: {examples(run.files_created)}"]
        if run.files_created else [])
    if problems:
        return CheckResult(check_id, title, FAIL, problems[0], evidence)
    if not rank0_paths:
        cap = capped(runs)
        return na(check_id, title, f"not exercised: {cap}, and nothing was written before" if cap
                  else "no files written")
    return CheckResult(check_id, title, PASS, f"only rank 0 wrote files: {examples(rank0_paths)}",
                       notes=notes)


def check_one_writer(runs: Runs) -> CheckResult:
    reason = unusable(runs, TORCHRUN)
    return na("one_writer", "one writer", reason) if reason else one_writer_in(runs, runs[TORCHRUN])
