"""What a run leaves behind: the probe's event files and the RunResult built from them.

Events are one JSON object per line, one file per rank. The probe (writer) and the runner
(reader) live in different processes; this module is the only place that knows the file
layout, so the two cannot drift apart. The checks read RunResult and nothing else.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field

EVENT_FILE = re.compile(r"^rank(\d+)\.jsonl$")
STACK_FILE = re.compile(r"^stack_rank(\d+)\.txt$")
# Names the run's TMPDIR for the probe when it lies outside the run's folder (a short one).
SCRATCH_ENV = "DDPIFY_VERIFY_SCRATCH"


def event_path(record_dir: str, rank: int) -> str:
    return os.path.join(record_dir, f"rank{rank}.jsonl")


def stack_path(record_dir: str, rank: int) -> str:
    return os.path.join(record_dir, f"stack_rank{rank}.txt")


def load_events(record_dir: str) -> dict[int, list[dict]]:
    """Events per rank; a line cut short by a killed process is dropped, not fatal."""
    events: dict[int, list[dict]] = {}
    for name in sorted(os.listdir(record_dir)):
        match = EVENT_FILE.match(name)
        if not match:
            continue
        rank_events = []
        with open(os.path.join(record_dir, name), encoding="utf-8") as lines:
            for line in lines:
                try:
                    rank_events.append(json.loads(line))
                except ValueError:
                    continue
        events[int(match.group(1))] = rank_events
    return events


def load_stacks(record_dir: str) -> dict[int, str]:
    """Stack dumps written by faulthandler in ranks that outlived their deadline."""
    stacks = {}
    for name in sorted(os.listdir(record_dir)):
        match = STACK_FILE.match(name)
        if match:
            with open(os.path.join(record_dir, name), encoding="utf-8", errors="replace") as dump:
                text = dump.read().strip()
            if text:
                stacks[int(match.group(1))] = text
    return stacks


def load_leftovers(report_paths: list[str]) -> list[dict]:
    """Processes the reapers found still running after their command ended (and killed)."""
    leftovers = []
    for path in report_paths:
        try:
            with open(path, encoding="utf-8") as report:
                leftovers.extend(json.load(report).get("leftovers", []))
        except (OSError, ValueError):
            continue
    return leftovers


@dataclass
class RunResult:
    """One run (possibly several processes): how it ended and what each rank recorded."""

    name: str
    commands: list[list[str]]
    returncodes: list[int | None]
    timed_out: bool
    seconds: float
    world_size: int
    limit: float = 0.0
    events: dict[int, list[dict]] = field(default_factory=dict)
    stacks: dict[int, str] = field(default_factory=dict)
    files_created: list[str] = field(default_factory=list)
    output_tail: str = ""
    script_name: str = ""
    # Processes still running after the run's command ended: [{pid, rank, cmdline}].
    leftovers: list[dict] = field(default_factory=list)
    # The working copy every process of the run ran in (the two nodes of the two-agent run share it).
    workdir: str = ""
    run_dir: str = ""
    # Files the working copy held before the run (relative paths): the script, a project's files.
    copied: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.timed_out and all(code == 0 for code in self.returncodes)

    def first_failure(self) -> tuple[int, dict] | None:
        """(rank, its `end` event) for the rank whose script raised first: the cause of the
        run's failure, whatever the other ranks did after it (failed on a closed connection,
        waited for it until killed)."""
        failures = [(event.get("t", float("inf")), rank, event)
                    for rank, rank_events in self.events.items() for event in rank_events
                    if event["ev"] == "end" and event.get("status") not in (0, None)]
        if not failures:
            return None
        _, rank, event = min(failures, key=lambda failure: failure[:2])
        return rank, event

    def backends(self) -> list[str]:
        """The process-group backends the ranks started (nccl, gloo)."""
        return sorted({event["name"] for rank_events in self.events.values() for event in rank_events
                       if event["ev"] == "backend"})

    def unfinished_ranks(self) -> list[int]:
        """Ranks that never started or never reached the end of the script or a stop."""
        return [
            rank
            for rank in range(self.world_size)
            if not any(event["ev"] in ("end", "stop") for event in self.events.get(rank, []))
        ]

    def stops(self) -> list[dict]:
        """The probe's `stop` events: a cap (--max-steps, --max-epochs) ended the process early."""
        return [event for rank_events in self.events.values() for event in rank_events if event["ev"] == "stop"]

    def relative(self, path: str) -> str:
        """A recorded absolute path as the user would read it: relative to the working copy."""
        if self.workdir and path.startswith(os.path.join(self.workdir, "")):
            return os.path.relpath(path, self.workdir)
        return path
