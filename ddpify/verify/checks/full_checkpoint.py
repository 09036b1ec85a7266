"""The `full_checkpoint` check (--strategy fsdp2): a checkpoint written under torchrun holds
the same model tensors, by the same names and shapes, as the original script's, with no
DTensor shard among them, so that it loads into the single-process model unchanged.

`model.state_dict()` of a sharded model holds this rank's DTensor shards: saved as it is, the
file needs a process group of the same shape to load. The probe records the tensors of each
torch.save; files written as Distributed Checkpoints (dcp.save, --checkpoint dcp) are
folders of shards by design and are not compared.
"""
from __future__ import annotations

from ddpify.verify.checks.events import dcp_folder, events_of
from ddpify.verify.checks.result import FAIL, PASS, CheckResult, examples, na
from ddpify.verify.run_set import ORIGINAL, TORCHRUN, Runs, unusable

CHECK_ID, TITLE = "full_checkpoint", "full checkpoint"


def last_saves(rank_events: list[dict]) -> dict[str, dict]:
    """The last torch.save of each path (as the script names it) that recorded its tensors."""
    return {event["path"]: event for event in events_of(rank_events, "save")
            if event.get("path") and event.get("tensors") is not None}


def problems_of(path: str, original: dict[str, list], written: dict[str, list]) -> list[str]:
    if set(written) != set(original):
        missing, extra = sorted(set(original) - set(written)), sorted(set(written) - set(original))
        return [f"{path}: keys differ from the original's" + (f"; missing {examples(missing)}" if missing else "")
                + (f"; not in the original {examples(extra)}" if extra else "")]
    shards = [key for key, (_, kind) in written.items() if kind != "Tensor"]
    if shards:
        return [f"{path}: {examples(shards)} saved as DTensor shards: gather the full state dict "
                "(get_model_state_dict with full_state_dict=True) before saving"]
    return [f"{path}: {key} has shape {tuple(written[key][0])}, the original's {tuple(shape)}"
            for key, (shape, _) in original.items() if written[key][0] != shape]


def check_full_checkpoint(runs: Runs) -> CheckResult:
    reason = unusable(runs, ORIGINAL, TORCHRUN)
    if reason:
        return na(CHECK_ID, TITLE, reason)
    original = last_saves(runs[ORIGINAL].events.get(0, []))
    if not original:
        return na(CHECK_ID, TITLE, "the original saves no checkpoint with torch.save")
    torchrun = runs[TORCHRUN]
    written = last_saves(torchrun.events.get(0, []))
    folders = {dcp_folder(torchrun.relative(event["abs"])) for rank_events in torchrun.events.values()
               for event in events_of(rank_events, "write") if event.get("abs")}
    problems, compared, as_dcp = [], [], []
    for path, save in sorted(original.items()):
        if path in folders:
            as_dcp.append(path)
        elif path not in written:
            problems.append(f"{path}: saved by the original, not by rank 0 under torchrun")
        else:
            compared.append(path)
            problems.extend(problems_of(path, save["tensors"], written[path]["tensors"]))
    if problems:
        return CheckResult(CHECK_ID, TITLE, FAIL, problems[0], problems)
    if not compared:
        return na(CHECK_ID, TITLE, f"written as Distributed Checkpoints (dcp.save): {examples(as_dcp)}")
    tensors = sum(len(original[path]["tensors"]) for path in compared)
    return CheckResult(CHECK_ID, TITLE, PASS, f"{examples(compared)}: the original's {tensors} tensors, "
                       "same names and shapes, none a DTensor shard"
                       + (f"; {examples(as_dcp)} written as Distributed Checkpoints" if as_dcp else ""))
