"""The `same_as_original` check: a group of one trains exactly as the original did.

With one process DDP must change nothing: the same optimizer steps with the same
parameters, and the same printed lines. When the original never seeds, no two runs agree,
so the comparison is n/a rather than a failure.
"""
from __future__ import annotations

from collections import Counter

from ddpify.verify.checks.events import events_of, line_shape, printed_lines
from ddpify.verify.checks.result import FAIL, PASS, CheckResult, na
from ddpify.verify.run_set import ORIGINAL, SINGLE, Runs, unusable

RELATIVE_TOLERANCE = 1e-6


def close(first: float, second: float) -> bool:
    return abs(first - second) <= RELATIVE_TOLERANCE * max(abs(first), abs(second), 1e-12)


def trajectory_differences(original_steps: list[dict], single_steps: list[dict]) -> tuple[list[str], bool]:
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


def output_differences(original_lines: list[str], single_lines: list[str]) -> list[str]:
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
