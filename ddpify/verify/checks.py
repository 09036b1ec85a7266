"""The verdicts: pure functions from recorded runs to pass / fail / n/a with evidence.

Runs are named ORIGINAL (`python train.py`), SINGLE (`python train_ddp.py`, a group of
one), TORCHRUN (`torchrun --standalone --nproc_per_node=N train_ddp.py`) and MULTINODE
(two torchrun agents, one process each). A check whose runs are missing or failed is n/a:
the failure is reported once, by the `runs` check.
"""
from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Callable, Dict, FrozenSet, List, Mapping, Optional, Tuple

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
# Runs whose failure is their own check's finding, not a failure of `runs`.
JUDGED_BY_THEIR_CHECK = {HANDOFF: "hand-off", IMPORT: "importable", ORIGINAL_IMPORT: "importable"}
# Where a write counts as the user's file: the working directory, or outside the run
# directory altogether (an absolute path shared by every run). The run's own HOME and
# TMPDIR hold caches and scratch files of each process; /dev and friends are not files.
USER_SCOPES = ("cwd", "outside", "other")
PASS, FAIL, NA = "pass", "fail", "n/a"
RELATIVE_TOLERANCE = 1e-6
# Fewer samples than this in two epochs could repeat their order by chance.
MIN_SAMPLES_TO_COMPARE_ORDER = 8
MAX_EXAMPLES = 5
NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|\b(?:nan|inf)\b")

Runs = Mapping[str, RunResult]


class RunSet(dict):
    """The runs of one verification, and why runs that were not launched were left out."""

    def __init__(self, runs: Optional[Mapping[str, RunResult]] = None, skipped: Optional[Dict[str, str]] = None,
                 slow_writes: float = 0.0):
        super().__init__(runs or {})
        self.skipped = dict(skipped or {})
        self.slow_writes = slow_writes


def skipped_reason(runs: Runs, name: str) -> Optional[str]:
    return getattr(runs, "skipped", {}).get(name)


@dataclass
class CheckResult:
    id: str
    title: str
    status: str
    summary: str
    evidence: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)


# -- reading events --------------------------------------------------------------------


def events_of(rank_events: List[dict], kind: str) -> List[dict]:
    return [event for event in rank_events if event["ev"] == kind]


def printed_lines(rank_events: List[dict]) -> List[str]:
    return [event["line"] for event in events_of(rank_events, "print")]


def line_shape(line: str) -> str:
    """A printed line with its numbers replaced, so rank 0's figures match the original's."""
    return NUMBER.sub("#", line.strip())


def user_writes(rank_events: List[dict]) -> List[dict]:
    return [event for event in rank_events
            if event["ev"] in ("save", "write") and event.get("path") and event.get("scope") in USER_SCOPES]


def written_paths(rank_events: List[dict]) -> List[str]:
    """Files a rank wrote where a user would look: its cwd or outside the run directory."""
    paths = []
    for event in user_writes(rank_events):
        if event["path"] not in paths:
            paths.append(event["path"])
    return paths


def at(event: dict) -> str:
    return f" ({event['where']})" if event.get("where") else ""


def first_write_of(rank_events: List[dict], path: str) -> dict:
    return next((event for event in user_writes(rank_events) if event["path"] == path), {})


def capped(runs: Runs) -> Optional[str]:
    """Which cap stopped runs before the end of the script, if one did."""
    reasons = sorted({event.get("reason", "") for run in runs.values() for event in run.stops()})
    if not reasons:
        return None
    options = ", ".join("--" + reason.replace("_", "-") for reason in reasons)
    return f"{options} stopped the runs before the script's end"


def per_machine_preparation(rank_events: List[dict]) -> List[str]:
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


def examples(items: List[str]) -> str:
    shown = ", ".join(items[:MAX_EXAMPLES])
    return shown + (f" (+{len(items) - MAX_EXAMPLES} more)" if len(items) > MAX_EXAMPLES else "")


def unusable(runs: Runs, *names: str) -> Optional[str]:
    """Why a check cannot look at these runs, or None when all of them completed."""
    for name in names:
        if name not in runs:
            return f"not checked: the {RUN_TITLES[name]} run was not requested"
        if not runs[name].ok:
            return f"not checked: the {RUN_TITLES[name]} run failed (see runs)"
    return None


def usable(runs: Runs, name: str) -> Optional[RunResult]:
    run = runs.get(name)
    return run if run is not None and run.ok else None


def na(check_id: str, title: str, reason: str) -> CheckResult:
    return CheckResult(check_id, title, NA, reason)


# -- runs ------------------------------------------------------------------------------


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


def describe_failed_run(run: RunResult) -> List[str]:
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


def check_runs(runs: Runs) -> CheckResult:
    title = "runs"
    judged = [run for name, run in runs.items() if name not in JUDGED_BY_THEIR_CHECK]
    failed = [run for run in judged if not run.ok]
    timings = ", ".join(f"{RUN_TITLES.get(run.name, run.name)} {run.seconds:.1f} s" for run in judged)
    cap = capped(runs)
    notes = [f"{cap}: code after training (final saves and prints, teardown) was not exercised, "
             "so one writer, one voice, hand-off and no processes left judge only what ran"] if cap else []
    if not judged:
        return na("runs", title, "nothing was run")
    if not failed:
        return CheckResult("runs", title, PASS, f"{len(judged)} runs exited 0 ({timings})", notes=notes)
    evidence = [line for run in failed for line in describe_failed_run(run)]
    if any(early_reads(run) for run in failed):
        evidence.append("a rank read a file before rank 0 finished writing it: see hand-off")
    hung_runs = [RUN_TITLES.get(run.name, run.name) for run in failed if hung(run)]
    summary = f"{len(failed)} of {len(judged)} runs failed" + (f"; hung: {', '.join(hung_runs)}" if hung_runs else "")
    return CheckResult("runs", title, FAIL, summary, evidence, notes)


# -- same as original ------------------------------------------------------------------


def close(first: float, second: float) -> bool:
    return abs(first - second) <= RELATIVE_TOLERANCE * max(abs(first), abs(second), 1e-12)


def trajectory_differences(original_steps: List[dict], single_steps: List[dict]) -> Tuple[List[str], bool]:
    """What differs between two step sequences, and whether they are bit-identical."""
    differences = []
    if len(original_steps) != len(single_steps):
        differences.append(
            f"the original made {len(original_steps)} optimizer steps, the group of one {len(single_steps)}"
        )
    exact = True
    for original, single in zip(original_steps, single_steps):
        if original["digest"] == single["digest"]:
            continue
        exact = False
        if not close(original["checksum"], single["checksum"]):
            differences.append(
                f"step {original['n']}: parameter sum {original['checksum']:.10g} (original) "
                f"vs {single['checksum']:.10g} (group of one); loss {original.get('loss')} vs {single.get('loss')}"
            )
            break
    return differences, exact


def output_differences(original_lines: List[str], single_lines: List[str]) -> List[str]:
    surplus_by_shape = Counter(map(line_shape, original_lines))
    surplus_by_shape.subtract(Counter(map(line_shape, single_lines)))
    return [
        f"printed {abs(surplus)} more time(s) by {'the original' if surplus > 0 else 'the group of one'}: {shape!r}"
        for shape, surplus in sorted(surplus_by_shape.items())
        if surplus
    ]


def check_same_as_original(runs: Runs) -> CheckResult:
    check_id, title = "same_as_original", "same as original"
    reason = unusable(runs, ORIGINAL, SINGLE)
    if reason:
        return na(check_id, title, reason)
    original_events, single_events = runs[ORIGINAL].events.get(0, []), runs[SINGLE].events.get(0, [])
    original_steps, single_steps = events_of(original_events, "step"), events_of(single_events, "step")
    steps_differ, exact = trajectory_differences(original_steps, single_steps)
    original_lines, single_lines = printed_lines(original_events), printed_lines(single_events)
    evidence = output_differences(original_lines, single_lines)
    seeded = bool(events_of(original_events, "seed"))
    if steps_differ and seeded:
        seeds = [[event["value"] for event in events_of(events, "seed")] for events in (original_events, single_events)]
        evidence = steps_differ + evidence + [f"torch.manual_seed calls: original {seeds[0]}, group of one {seeds[1]}"]
    if evidence:
        return CheckResult(check_id, title, FAIL, evidence[0], evidence)
    if steps_differ:
        return na(check_id, title, "not comparable: the original never calls torch.manual_seed, so no two runs agree")
    if not original_steps:
        return na(check_id, title, "no optimizer.step() observed")
    stdout = "stdout identical" if original_lines == single_lines else "stdout has the same lines, numbers differ"
    parameters = "bit-identical" if exact else f"equal within {RELATIVE_TOLERANCE:g} relative"
    return CheckResult(check_id, title, PASS, f"{len(original_steps)} steps, parameters {parameters}; {stdout}")


# -- ranks agree -----------------------------------------------------------------------


def ranks_agree_on(runs: Runs, run: RunResult) -> CheckResult:
    check_id, title = "ranks_agree", "ranks agree"
    steps_per_rank = {rank: events_of(rank_events, "step") for rank, rank_events in sorted(run.events.items())}
    if len(steps_per_rank) < 2:
        return na(check_id, title, "fewer than two ranks recorded")
    counts = {rank: len(steps) for rank, steps in steps_per_rank.items()}
    if not any(counts.values()):
        return na(check_id, title, "no optimizer.step() observed")
    if len(set(counts.values())) > 1:
        detail = ", ".join(f"rank {rank}: {count}" for rank, count in counts.items())
        return CheckResult(check_id, title, FAIL, f"ranks made different numbers of steps ({detail})")
    for step_events in zip(*steps_per_rank.values()):
        if len({event["digest"] for event in step_events}) > 1:
            detail = ", ".join(
                f"rank {rank}: {event['checksum']:.10g}" for rank, event in zip(steps_per_rank, step_events)
            )
            return CheckResult(
                check_id, title, FAIL,
                f"parameters differ between ranks after step {step_events[0]['n']} (is the model wrapped in DDP?)",
                [f"parameter sums after step {step_events[0]['n']}: {detail}"],
            )
    steps = next(iter(counts.values()))
    return CheckResult(
        check_id, title, PASS, f"parameters bit-identical on {len(counts)} ranks after each of {steps} steps"
    )


def check_ranks_agree(runs: Runs) -> CheckResult:
    reason = unusable(runs, TORCHRUN)
    return na("ranks_agree", "ranks agree", reason) if reason else ranks_agree_on(runs, runs[TORCHRUN])


# -- data sharded ----------------------------------------------------------------------


def training_loaders(run: RunResult) -> List[int]:
    """Loaders that batches were drawn from right before optimizer steps."""
    loaders = {
        event["loader"]
        for rank_events in run.events.values()
        for event in events_of(rank_events, "step")
        if event.get("loader") is not None
    }
    return sorted(loaders)


def epoch_indices(rank_events: List[dict], loader: int) -> Dict[int, List]:
    indices: Dict[int, List] = defaultdict(list)
    for event in events_of(rank_events, "fetch"):
        if event["loader"] == loader:
            indices[event["epoch"]].extend(event["indices"])
    return indices


def loader_info(rank_events: List[dict], loader: int) -> dict:
    return next((event for event in events_of(rank_events, "iter") if event["loader"] == loader), {})


def exhausted_epochs(rank_events: List[dict], loader: int) -> set:
    return {event["epoch"] for event in events_of(rank_events, "exhausted") if event["loader"] == loader}


def original_shuffles(runs: Runs, migrated: RunResult, loader: int) -> Optional[bool]:
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


def sharding_problems(run: RunResult, loader: int, notes: List[str]) -> List[str]:
    problems = []
    world_size = len(run.events)
    per_rank = {rank: epoch_indices(rank_events, loader) for rank, rank_events in run.events.items()}
    info = loader_info(run.events.get(0, []), loader)
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


def shuffle_problem(runs: Runs, run: RunResult, loader: int, notes: List[str]) -> Optional[str]:
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
    problems: List[str] = []
    notes: List[str] = []
    for loader in loaders:
        problems.extend(sharding_problems(run, loader, notes))
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
    summary = f"each sample fetched once per epoch across {len(run.events)} ranks ({observed})"
    if not any("not compared" in note for note in notes):
        summary += ", order changes between epochs"
    return CheckResult(check_id, title, PASS, summary, notes=notes)


def check_data_sharded(runs: Runs) -> CheckResult:
    reason = unusable(runs, TORCHRUN)
    return na("data_sharded", "data sharded", reason) if reason else data_sharded_in(runs, runs[TORCHRUN])


# -- one writer ------------------------------------------------------------------------


def one_writer_in(runs: Runs, run: RunResult) -> CheckResult:
    check_id, title = "one_writer", "one writer"
    problems, notes = [], []
    for rank, rank_events in sorted(run.events.items()):
        paths = written_paths(rank_events)
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


# -- one voice -------------------------------------------------------------------------


def one_voice_in(runs: Runs, run: RunResult) -> CheckResult:
    """Who prints, not how often: only rank 0 may print. How many times a line prints is not
    compared with the original, as a line printed on a condition of the training's results
    (`if acc > best_acc: print("Saving best..")`) rightly prints a different number of times
    when N ranks train together."""
    check_id, title = "one_voice", "one voice"
    problems, notes = [], []
    for rank, rank_events in sorted(run.events.items()):
        prints = events_of(rank_events, "print")
        if rank != 0 and prints:
            problems.append(f"rank {rank} printed {len(prints)} line(s): {examples(printing_lines(prints))}")
    rank0_shapes = {line_shape(line) for line in printed_lines(run.events.get(0, []))}
    original = usable(runs, ORIGINAL)
    original_shapes = Counter(map(line_shape, printed_lines(original.events.get(0, [])))) if original else Counter()
    for shape, count in sorted(original_shapes.items()):
        if shape not in rank0_shapes:
            notes.append(f"printed {count} time(s) by the original, never by rank 0 in the "
                         f"{RUN_TITLES[run.name]} run: {shape!r}")
    if problems:
        return CheckResult(check_id, title, FAIL, problems[0], problems, notes)
    total = sum(len(printed_lines(rank_events)) for rank_events in run.events.values())
    if not total and not original_shapes:
        return na(check_id, title, "nothing printed")
    return CheckResult(check_id, title, PASS, f"only rank 0 printed ({total} lines)", notes=notes)


def printing_lines(prints: List[dict]) -> List[str]:
    """Each distinct line a rank printed, with the script line that printed it and how often."""
    found: Dict[Tuple[str, Optional[str]], List] = {}
    for event in prints:
        found.setdefault((line_shape(event["line"]), event.get("where")), [event["line"], 0])[1] += 1
    return [repr(line) + (f" ({where})" if where else "") + (f" x{count}" if count > 1 else "")
            for (_, where), (line, count) in found.items()]


def check_one_voice(runs: Runs) -> CheckResult:
    reason = unusable(runs, TORCHRUN)
    return na("one_voice", "one voice", reason) if reason else one_voice_in(runs, runs[TORCHRUN])


# -- multi-node ready ------------------------------------------------------------------


def check_multinode_ready(runs: Runs) -> CheckResult:
    """The two-agent run, judged only on what a one-machine run does not already show.

    A guard on LOCAL_RANK passes on one machine and fails here; a script that writes on
    every rank fails everywhere and is reported once, by one_writer, not twice.
    """
    check_id, title = "multinode_ready", "multi-node ready"
    run = runs.get(MULTINODE)
    one_machine = runs.get(TORCHRUN)
    if run is None:
        return na(check_id, title, "not checked: the two-node run was not requested")
    if not run.ok:
        if one_machine is not None and not one_machine.ok:
            return na(check_id, title, "not judged: the one-machine torchrun run fails too (see runs)")
        failure = run.first_failure()
        cause = f": rank {failure[0]} failed first: {failure_text(failure[1])}{at(failure[1])}" if failure else \
            " (see runs)"
        return CheckResult(check_id, title, FAIL, f"the two-agent run failed{cause}", describe_failed_run(run))
    ranks = [
        f"RANK={event['rank']} LOCAL_RANK={event['local_rank']}"
        for rank_events in run.events.values()
        for event in events_of(rank_events, "start")
    ]
    judges = (ranks_agree_on, one_writer_in, one_voice_in)
    parts = [judge(runs, run) for judge in judges]
    already = [judge(runs, one_machine).status == FAIL if usable(runs, TORCHRUN) else False for judge in judges]
    new_failures = [part for part, known in zip(parts, already) if part.status == FAIL and not known]
    known_failures = [part.title for part, known in zip(parts, already) if part.status == FAIL and known]
    if new_failures:
        evidence = [f"{part.title}: {line}" for part in new_failures for line in (part.evidence or [part.summary])]
        return CheckResult(
            check_id, title, FAIL, f"{new_failures[0].title}: {new_failures[0].summary}", evidence + ranks
        )
    if known_failures:
        return na(check_id, title, f"not judged: {', '.join(known_failures)} already fail(s) on one machine")
    return CheckResult(
        check_id, title, PASS, f"two agents ({', '.join(sorted(ranks))}): ranks agree, one writer, one voice",
        notes=files_between_nodes(run),
    )


def files_between_nodes(run: RunResult) -> List[str]:
    """The two agents share one working copy, as nodes on a cluster's shared filesystem do:
    a file rank 0 writes and the other node reads is worth knowing about before a cluster
    whose nodes do not share one (node-local disks, /tmp)."""
    notes = []
    for path in handoff_paths(run):
        notes.append(f"rank 0 wrote {path} and the other node read it: the nodes need a shared filesystem "
                     "(the two agents here share one working directory)")
    return notes


# -- hand-off --------------------------------------------------------------------------


NEVER = float("inf")


def rank0_writes_by_path(run: RunResult) -> Dict[str, List[dict]]:
    """Rank 0's writes of each file with when they began (t) and ended (t_done): a file
    opened for writing counts as written when opened; a torch.save when its `saved` event
    came, never if the process died first."""
    writes: Dict[str, List[dict]] = defaultdict(list)
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


def handed_off_reads(run: RunResult) -> List[Tuple[int, dict, List[dict]]]:
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


def handoff_paths(run: RunResult) -> List[str]:
    """Files rank 0 writes and another rank reads: the ones the hand-off run writes late."""
    return sorted({run.relative(read["abs"]) for _, read, _ in handed_off_reads(run)})


def early_reads(run: RunResult) -> List[str]:
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
    handed = handoff_paths(torchrun)
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


# -- no move after wrap ----------------------------------------------------------------


def check_no_move_after_wrap(runs: Runs) -> CheckResult:
    """On a GPU, .to()/.cpu() on a DDP model after the wrap moves parameters out from under
    DDP's gradient buckets; on the CPU it changes nothing visible, so it is caught here."""
    check_id, title = "no_move_after_wrap", "no move after wrap"
    run = runs.get(TORCHRUN)
    if run is None:
        return na(check_id, title, "not checked: the torchrun run was not requested")
    problems, seen = [], set()
    for rank, rank_events in sorted(run.events.items()):
        for event in events_of(rank_events, "move_after_wrap"):
            key = (event["method"], event.get("where"))
            if key not in seen:
                seen.add(key)
                target = ("the DDP model" if event["module"] == "DistributedDataParallel"
                          else f"{event['module']}, the module DDP wraps,")
                problems.append(f".{event['method']}() on {target} after the wrap{at(event)} on rank {rank}: "
                                "move the model to its device before DDP(...), never after")
    if problems:
        return CheckResult(check_id, title, FAIL, problems[0], problems)
    reason = unusable(runs, TORCHRUN)
    if reason:
        return na(check_id, title, reason)
    wraps = [event for event in events_of(run.events.get(0, []), "wrap")]
    if not wraps:
        return na(check_id, title, "no DistributedDataParallel was built")
    return CheckResult(check_id, title, PASS,
                       f"no .to()/.cuda()/.cpu() on a wrapped model after its wrap{at(wraps[0])}")


# -- importable ------------------------------------------------------------------------


def import_failure(run: RunResult) -> Optional[str]:
    if run.timed_out:
        return f"importing did not finish within {run.limit:g} s"
    for event in events_of(run.events.get(0, []), "end"):
        if event.get("status") not in (0, None):
            return f"{event.get('error', 'exit status ' + str(event['status']))}{at(event)}"
    if not run.ok:
        return f"exit status {', '.join(map(str, run.returncodes))}"
    return None


def check_importable(runs: Runs) -> CheckResult:
    """`import train_ddp` (tests, notebooks, tools) must run no training and raise no
    NameError: the migration must not put code that needs main()'s names at module level."""
    check_id, title = "importable", "importable"
    run = runs.get(IMPORT)
    if run is None:
        return na(check_id, title, skipped_reason(runs, IMPORT) or "not checked: the import was not requested")
    failure = import_failure(run)
    if failure:
        original = runs.get(ORIGINAL_IMPORT)
        original_failure = import_failure(original) if original is not None else None
        if original_failure:
            return na(check_id, title, f"the original does not import either: {original_failure}")
        return CheckResult(check_id, title, FAIL, f"importing the migrated script fails: {failure}",
                           [f"importing the migrated script fails: {failure}", "the original imports cleanly"])
    starts = events_of(run.events.get(0, []), "init_pg")
    if starts:
        return CheckResult(check_id, title, FAIL,
                           f"importing the migrated script starts a process group{at(starts[0])}")
    return CheckResult(check_id, title, PASS, "imports without running: no error, no process group started")


# -- no processes left -----------------------------------------------------------------


def check_no_leftovers(runs: Runs) -> CheckResult:
    """Every process a run starts ends with it: a server or worker left running holds
    ports, memory and GPUs on the user's machine after training is over."""
    check_id, title = "no_leftovers", "no processes left"
    problems = []
    for run in runs.values():
        for leftover in run.leftovers:
            rank = "" if leftover.get("rank") is None else f" by rank {leftover['rank']}"
            problems.append(f"{RUN_TITLES.get(run.name, run.name)}: a process started{rank} was still running "
                            f"after the run ended (pid {leftover['pid']}: {leftover.get('cmdline') or '?'}); "
                            "verify killed it")
    if problems:
        return CheckResult(check_id, title, FAIL, problems[0], problems)
    finished = [run for run in runs.values() if not run.timed_out]
    if not finished:
        return na(check_id, title, "no run finished")
    return CheckResult(check_id, title, PASS, f"no process outlived its run ({len(finished)} runs)")

@dataclass(frozen=True)
class Check:
    id: str
    title: str
    needs: FrozenSet[str]
    function: Callable[[Runs], CheckResult]


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
)
CHECK_IDS = tuple(check.id for check in CHECKS)


def runs_needed(check_ids: List[str]) -> List[str]:
    """The runs the chosen checks look at, in launch order; all of them for `runs` alone."""
    needed = set().union(*(check.needs for check in CHECKS if check.id in check_ids))
    order = (*ALL_RUNS, IMPORT)
    return [name for name in order if name in needed] if needed else list(order)


def evaluate(runs: Runs, check_ids: List[str]) -> List[CheckResult]:
    return [check.function(runs) for check in CHECKS if check.id in check_ids]
