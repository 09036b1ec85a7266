"""Small cases a rule unit keeps beside its code: a few lines of a training script and what
ddpify must do with them. tests/test_rule_cases.py runs the CASES of every unit."""
from dataclasses import dataclass
from typing import Tuple, Union


@dataclass(frozen=True)
class Emits:
    """Migrating `source` reports `code`, and the output holds each of `output_contains`."""

    source: str
    code: str
    output_contains: Tuple[str, ...] = ()


@dataclass(frozen=True)
class Silent:
    """A source close to one that reports `code`, where the code must not be reported."""

    source: str
    code: str


@dataclass(frozen=True)
class Flags:
    """The self-check reports `code` on `migrated`, a broken output for `original`: it reads
    ddpify's output, so a correct migration never shows it (tests/test_selfcheck.py)."""

    original: str
    migrated: str
    code: str


Case = Union[Emits, Silent, Flags]
