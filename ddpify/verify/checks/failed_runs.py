"""Why a run failed: the rank that raised first, with its traceback, is the cause; a run
with no failing rank that outlived its limit hung, and each waiting rank's line is named.

Shared by the `runs` check, the checks that judge a run of their own (hand-off,
multi-node ready) and the report's run table, so a failure reads the same everywhere.
"""
from __future__ import annotations

import re

from ddpify.verify.checks.events import events_of
from ddpify.verify.checks.result import at
from ddpify.verify.records import RunResult
from ddpify.verify.run_set import RUN_TITLES


def summarize_stack(dump: str, script_name: str) -> str:
    """Where a hung rank's main thread waits: the script's line and the call it is in."""
    blocks = re.split(r"\n(?=(?:Current thread|Thread) 0x)", dump)
    main = next((block for block in blocks if "run_path" in block or f'"{script_name}"' in block), dump)
    frames = re.findall(r'File "([^"]+)", line (\d+) in (\S+)', main)
    if not frames:
        return "no stack recorded"
    innermost_file, innermost_line, innermost_function = frames[0]
    where = f"in {innermost_function} ({innermost_file.rsplit('/', 1)[-1]}:{innermost_line})"
    own = [frame for frame in frames if frame[0].endswith(script_name)]
    if own:
        return f"{script_name}:{own[0][1]}, {where}"
    return where


def describe_failed_run(run: RunResult) -> list[str]:
    """Why a run failed: the rank that raised first, with its traceback, is the cause; a run
    with no failing rank that outlived its limit hung, and each waiting rank's line is named."""
    title = RUN_TITLES.get(run.name, run.name)
    lines = []
    failure = run.first_failure()
    if failure:
        rank, event = failure
        lines.append(f"{title}: rank {rank} failed first: {failure_text(event)}{at(event)}")
        lines.extend(f"  | {frame}" for frame in event.get("traceback", []))
    if run.timed_out:
        lines.append(f"{title}: still running at its {run.limit:g} s limit, killed")
        for rank in run.unfinished_ranks():
            if rank not in run.events:
                lines.append(f"  rank {rank}: never started")
            elif rank in run.stacks:
                lines.append(f"  rank {rank} waits at {summarize_stack(run.stacks[rank], run.script_name)}")
            else:
                lines.append(f"  rank {rank}: still running, no stack dump")
        return lines
    lines.append(f"{title}: exit status {', '.join(str(code) for code in run.returncodes)}")
    for rank, rank_events in sorted(run.events.items()):
        for event in events_of(rank_events, "end"):
            if event.get("status") not in (0, None) and (rank, event) != failure:
                lines.append(f"  rank {rank}: {failure_text(event)}{at(event)}")
    if not failure:
        # No rank's script raised (killed, or failed outside it): the launcher's last words.
        tail = [line for line in run.output_tail.strip().splitlines() if line.strip()][-3:]
        lines.extend("  | " + line for line in tail)
    return lines


def failure_text(end_event: dict) -> str:
    return end_event.get("error", f"exit status {end_event['status']}")


def hung(run: RunResult) -> bool:
    """Still running at its limit with no rank that failed: a hang, not a crash."""
    return run.timed_out and run.first_failure() is None
