"""What a rule and a diagnostic are, and how diagnostics are filtered and explained.

Codes are stable and never reused: DDP0xx setup and devices, DDP1xx model, DDP2xx data,
DDP3xx rank-0 side effects, DDP4xx numerics and performance, DDP9xx needs a person or
informs about the whole file. Each rule is defined in the unit that reports it
(ddpify/rules/*.py); ddpify.rules.registry collects them.
"""
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from ddpify import interrupts


class Severity(str, Enum):
    # A rewrite ddpify made; listed in --format json, not printed by default.
    EDIT = "edit"
    # Worth knowing, nothing to do: does not change the exit code.
    INFO = "info"
    # Needs a person: ddpify could not migrate this safely; exit code 1.
    WARNING = "warning"


class Status(str, Enum):
    ACTIVE = "active"
    # Never reported any more; listed so that the code is never reused.
    REMOVED = "removed"


@dataclass(frozen=True)
class Rule:
    code: str
    severity: Severity
    summary: str
    why: str
    fix: str
    status: Status = Status.ACTIVE

    @property
    def removed(self) -> bool:
        return self.status is Status.REMOVED


@dataclass(frozen=True)
class Diagnostic:
    code: str
    line: int
    column: int
    message: str
    end_line: int = 0

    @property
    def severity(self) -> Severity:
        return rule_of(self.code).severity

    def format(self, path: str) -> str:
        return f"{path}:{self.line}:{self.column}: {self.code} {self.message}"


def registry() -> Mapping[str, Rule]:
    """Every rule by code. The units that define the rules import this module (and emit, which
    reports through it), so the registry is imported here on first use, not at import time:
    this is the one place that breaks the cycle."""
    with interrupts.deferred():  # (ddpify.interrupts: why an import is not cut short)
        from ddpify.rules.registry import RULES

    return RULES


def rule_of(code: str) -> Rule:
    return registry()[code]


def is_selected(code: str, select: Sequence[str], ignore: Sequence[str]) -> bool:
    """`--select` and `--ignore` take full codes or prefixes such as DDP2."""
    if select and not any(code.startswith(prefix) for prefix in select):
        return False
    return not any(code.startswith(prefix) for prefix in ignore)


def unknown_codes(codes) -> tuple:
    """Codes or prefixes that select no rule: a typo (DDP2O4) would silently hide warnings."""
    return tuple(code for code in codes if not any(known.startswith(code) for known in registry()))


def explain(code: str) -> str:
    rule = registry()[code]
    silence = (f"To keep it on one line you have checked: `# ddpify: ignore[{rule.code}]` on "
               "that line or on the first line of its statement (or a bare `# ddpify: ignore` "
               "for every code there); --check reports a comment that silences nothing "
               "(DDP920).\n" if rule.severity is not Severity.EDIT and not rule.removed else "")
    return (
        f"{rule.code} ({rule.severity.value}{', removed' if rule.removed else ''}): {rule.summary}\n\n"
        f"Why: {rule.why}\n\nFix: {rule.fix}\n"
        + (f"\n{silence}" if silence else "")
    )
