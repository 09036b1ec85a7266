"""The `one_voice` check: only rank 0 prints, and it prints every line the original did.

N ranks printing the same log repeat every line N times; a line rank 0 never prints is
one the migration guarded away from the only rank that should print it.
"""
from __future__ import annotations

from collections import Counter

from ddpify.verify.checks.events import events_of, line_shape, printed_lines
from ddpify.verify.checks.result import FAIL, PASS, CheckResult, examples, na
from ddpify.verify.records import RunResult
from ddpify.verify.run_set import ORIGINAL, RUN_TITLES, TORCHRUN, Runs, unusable, usable


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


def printing_lines(prints: list[dict]) -> list[str]:
    """Each distinct line a rank printed, with the script line that printed it and how often."""
    found: dict[tuple[str, str | None], list] = {}
    for event in prints:
        found.setdefault((line_shape(event["line"]), event.get("where")), [event["line"], 0])[1] += 1
    return [repr(line) + (f" ({where})" if where else "") + (f" x{count}" if count > 1 else "")
            for (_, where), (line, count) in found.items()]


def check_one_voice(runs: Runs) -> CheckResult:
    reason = unusable(runs, TORCHRUN)
    return na("one_voice", "one voice", reason) if reason else one_voice_in(runs, runs[TORCHRUN])
