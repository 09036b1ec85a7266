"""What a check hands back: a status, a one-line summary and the evidence behind it.

The evidence helpers live here, beside the result, so that every check words its lines
the same way (a script line in parentheses, a few examples and a count of the rest).
"""
from __future__ import annotations

from dataclasses import dataclass, field

PASS, FAIL, NA = "pass", "fail", "n/a"
MAX_EXAMPLES = 5


@dataclass
class CheckResult:
    id: str
    title: str
    status: str
    summary: str
    evidence: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def na(check_id: str, title: str, reason: str) -> CheckResult:
    return CheckResult(check_id, title, NA, reason)


def examples(items: list[str]) -> str:
    shown = ", ".join(items[:MAX_EXAMPLES])
    return shown + (f" (+{len(items) - MAX_EXAMPLES} more)" if len(items) > MAX_EXAMPLES else "")


def at(event: dict) -> str:
    return f" ({event['where']})" if event.get("where") else ""
