"""Reading a rank's recorded events: what it printed, which files it wrote, why it stopped.

Several checks ask the same questions of the probe's events; the answers are written once
here so that one writer, one voice and hand-off agree on what counts as a user's file.
"""
from __future__ import annotations

import os
import re

from ddpify.verify.run_set import Runs

# Where a write counts as the user's file: the working directory, or outside the run
# directory altogether (an absolute path shared by every run). The run's own HOME and
# TMPDIR hold caches and scratch files of each process; /dev and friends are not files.
USER_SCOPES = ("cwd", "outside", "other")
NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|\b(?:nan|inf)\b")


def events_of(rank_events: list[dict], kind: str) -> list[dict]:
    return [event for event in rank_events if event["ev"] == kind]


def printed_lines(rank_events: list[dict]) -> list[str]:
    return [event["line"] for event in events_of(rank_events, "print")]


def line_shape(line: str) -> str:
    """A printed line with its numbers replaced, so rank 0's figures match the original's."""
    return NUMBER.sub("#", line.strip())


def user_writes(rank_events: list[dict]) -> list[dict]:
    return [event for event in rank_events
            if event["ev"] in ("save", "write") and event.get("path") and event.get("scope") in USER_SCOPES]


def written_paths(rank_events: list[dict]) -> list[str]:
    """Files a rank wrote where a user would look: its cwd or outside the run directory."""
    paths = []
    for event in user_writes(rank_events):
        if event["path"] not in paths:
            paths.append(event["path"])
    return paths


# A Distributed Checkpoint's files (torch.distributed.checkpoint's FileSystemWriter): each
# rank writes its own shards, `__{rank}_{n}.distcp`, and the coordinator the `.metadata`
# (through `.metadata.tmp`), all in the folder the checkpoint is named by.
DCP_SHARD = re.compile(r"^__(\d+)_\d+\.distcp$")
DCP_METADATA = (".metadata", ".metadata.tmp")


def dcp_folder(path: str) -> str | None:
    """The checkpoint folder a Distributed Checkpoint file belongs to, else None."""
    folder, name = os.path.split(path)
    return folder if folder and (DCP_SHARD.match(name) or name in DCP_METADATA) else None


def own_dcp_shard(rank: int, path: str) -> bool:
    """`__1_0.distcp` written by rank 1: its own shard of a dcp.save, by design."""
    match = DCP_SHARD.match(os.path.basename(path))
    return match is not None and int(match.group(1)) == rank


def first_write_of(rank_events: list[dict], path: str) -> dict:
    return next((event for event in user_writes(rank_events) if event["path"] == path), {})


def capped(runs: Runs) -> str | None:
    """Which cap stopped runs before the end of the script, if one did."""
    reasons = sorted({event.get("reason", "") for run in runs.values() for event in run.stops()})
    if not reasons:
        return None
    options = ", ".join("--" + reason.replace("_", "-") for reason in reasons)
    return f"{options} stopped the runs before the script's end"


def per_machine_preparation(rank_events: list[dict]) -> list[str]:
    """Files a machine's first process (LOCAL_RANK 0) wrote before the first optimizer step:
    a dataset downloaded once per machine, as machines need not share a filesystem."""
    starts = events_of(rank_events, "start")
    if not starts or starts[0].get("local_rank") != 0:
        return []
    before_training = []
    for event in rank_events:
        if event["ev"] == "step":
            break
        before_training.append(event)
    return written_paths(before_training)
