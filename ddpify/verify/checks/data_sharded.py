"""The `data_sharded` check: each sample is fetched by one rank per epoch, and the order
changes between epochs when the original shuffles.

Judged from the indices each rank's training loaders handed out, so a missing
DistributedSampler (every rank sees everything) and a missing set_epoch (every epoch
repeats the same order) both show, whatever the script prints.
"""
from __future__ import annotations

from collections import Counter, defaultdict

from ddpify.verify.checks.events import events_of
from ddpify.verify.checks.result import FAIL, PASS, CheckResult, examples, na
from ddpify.verify.records import RunResult
from ddpify.verify.run_set import ORIGINAL, TORCHRUN, Runs, unusable, usable

# Fewer samples than this in two epochs could repeat their order by chance.
MIN_SAMPLES_TO_COMPARE_ORDER = 8


def training_loaders(run: RunResult) -> list[int]:
    """Loaders that batches were drawn from right before optimizer steps."""
    loaders = {
        event["loader"]
        for rank_events in run.events.values()
        for event in events_of(rank_events, "step")
        if event.get("loader") is not None
    }
    return sorted(loaders)


def epoch_indices(rank_events: list[dict], loader: int) -> dict[int, list]:
    indices: dict[int, list] = defaultdict(list)
    for event in events_of(rank_events, "fetch"):
        if event["loader"] == loader:
            indices[event["epoch"]].extend(event["indices"])
    return indices


def loader_info(rank_events: list[dict], loader: int) -> dict:
    return next((event for event in events_of(rank_events, "iter") if event["loader"] == loader), {})


def exhausted_epochs(rank_events: list[dict], loader: int) -> set:
    return {event["epoch"] for event in events_of(rank_events, "exhausted") if event["loader"] == loader}


def original_shuffles(runs: Runs, migrated: RunResult, loader: int) -> bool | None:
    """Whether the original's loader shuffles; the migrated sampler's word if it was not run."""
    original = usable(runs, ORIGINAL)
    if original is not None:
        info = loader_info(original.events.get(0, []), loader)
        if info.get("shuffle") is not None:
            return info["shuffle"]
        epochs = epoch_indices(original.events.get(0, []), loader)
        if 0 in epochs and 1 in epochs:
            return epochs[0] != epochs[1][: len(epochs[0])]
        return None
    return loader_info(migrated.events.get(0, []), loader).get("shuffle")


def replacement_problems(runs: Runs, run: RunResult, loader: int, notes: list[str]) -> list[str]:
    """A sampler that draws with replacement repeats some samples and misses others in every
    epoch, sharded or not: what shows that the ranks split its draw is that no rank draws more
    than its share (1/N, rounded up) of what the original drew in that epoch."""
    notes.append(f"loader {loader}: the sampler draws with replacement, so repeated and unfetched "
                 "samples are expected; judged by each rank's share of the draw")
    original = usable(runs, ORIGINAL)
    if original is None:
        return []
    drawn = epoch_indices(original.events.get(0, []), loader)
    world_size = len(run.events)
    problems = []
    for rank, rank_events in sorted(run.events.items()):
        complete = exhausted_epochs(rank_events, loader)
        for epoch, indices in sorted(epoch_indices(rank_events, loader).items()):
            whole = len(drawn.get(epoch, []))
            share = -(-whole // world_size)
            if epoch in complete and whole and len(indices) > share:
                problems.append(f"loader {loader}, epoch {epoch}: rank {rank} drew {len(indices)} samples, "
                                f"more than its share ({share}) of the {whole} the original drew")
    return problems


def sharding_problems(run: RunResult, loader: int, notes: list[str], runs: Runs | None = None) -> list[str]:
    problems = []
    world_size = len(run.events)
    per_rank = {rank: epoch_indices(rank_events, loader) for rank, rank_events in run.events.items()}
    info = loader_info(run.events.get(0, []), loader)
    if info.get("replacement"):
        return replacement_problems(runs or {}, run, loader, notes)
    epochs = sorted({epoch for indices in per_rank.values() for epoch in indices})
    for epoch in epochs:
        counts = Counter(index for indices in per_rank.values() for index in indices.get(epoch, []))
        repeated = sorted((index for index, count in counts.items() if count > 1), key=str)
        extra = sum(count - 1 for count in counts.values())
        if extra > world_size - 1:
            problems.append(
                f"loader {loader}, epoch {epoch}: {len(repeated)} samples fetched by more than one rank "
                f"(e.g. {examples([str(index) for index in repeated])})"
            )
        elif extra:
            notes.append(f"loader {loader}, epoch {epoch}: {extra} padding duplicate(s) from DistributedSampler")
        complete = all(epoch in exhausted_epochs(rank_events, loader) for rank_events in run.events.values())
        dataset_len = info.get("dataset_len")
        if complete and dataset_len:
            missing = dataset_len - len(counts)
            if missing > 0 and info.get("drop_last"):
                notes.append(f"loader {loader}, epoch {epoch}: {missing} samples dropped by drop_last")
            elif missing > 0:
                problems.append(f"loader {loader}, epoch {epoch}: {missing} of {dataset_len} samples never fetched")
    return problems


def shuffle_problem(runs: Runs, run: RunResult, loader: int, notes: list[str]) -> str | None:
    shuffles = original_shuffles(runs, run, loader)
    if not shuffles:
        notes.append(f"loader {loader}: order per epoch not compared (the original does not shuffle)")
        return None
    repeats, compared = [], 0
    for rank, rank_events in sorted(run.events.items()):
        indices = epoch_indices(rank_events, loader)
        if not indices.get(0) or not indices.get(1):
            notes.append(f"loader {loader}: order per epoch not compared (fewer than 2 epochs observed)")
            return None
        length = min(len(indices[0]), len(indices[1]))
        compared += length
        if indices[0][:length] == indices[1][:length]:
            repeats.append(rank)
    if compared < MIN_SAMPLES_TO_COMPARE_ORDER:
        notes.append(f"loader {loader}: order per epoch not compared (too few samples)")
        return None
    if len(repeats) == len(run.events):
        set_epoch_calls = sum(len(events_of(rank_events, "set_epoch")) for rank_events in run.events.values())
        return (
            f"loader {loader}: every rank fetched the same order in epoch 0 and epoch 1 "
            f"(set_epoch was called {set_epoch_calls} time(s))"
        )
    return None


def data_sharded_in(runs: Runs, run: RunResult) -> CheckResult:
    check_id, title = "data_sharded", "data sharded"
    loaders = training_loaders(run)
    if not loaders:
        return na(check_id, title, "no batches from a map-style DataLoader before optimizer steps")
    problems: list[str] = []
    notes: list[str] = []
    for loader in loaders:
        problems.extend(sharding_problems(run, loader, notes, runs))
        order = shuffle_problem(runs, run, loader, notes)
        if order:
            problems.append(order)
    if problems:
        return CheckResult(check_id, title, FAIL, problems[0], problems, notes)
    epochs = {epoch for rank_events in run.events.values() for epoch in epoch_indices(rank_events, loaders[0])}
    cut = {event["epoch"] for rank_events in run.events.values() for event in events_of(rank_events, "iter")
           if event["loader"] == loaders[0] and event.get("cut")}
    observed = f"{len(epochs - cut)} full epoch(s)"
    if epochs & cut:
        observed += f", {len(epochs & cut)} cut to one batch"
    if loader_info(run.events.get(0, []), loaders[0]).get("replacement"):
        summary = f"each of {len(run.events)} ranks drew its share of the sampler's draw per epoch ({observed})"
    else:
        summary = f"each sample fetched once per epoch across {len(run.events)} ranks ({observed})"
    if not any("not compared" in note for note in notes):
        summary += ", order changes between epochs"
    return CheckResult(check_id, title, PASS, summary, notes=notes)


def check_data_sharded(runs: Runs) -> CheckResult:
    reason = unusable(runs, TORCHRUN)
    return na("data_sharded", "data sharded", reason) if reason else data_sharded_in(runs, runs[TORCHRUN])
