"""Per-line suppressions: `# ddpify: ignore[DDP208]` or a bare `# ddpify: ignore`.

A person who has read a diagnostic and decided it does not apply says so on the line it
names, or on the first line of the statement that holds that line (a call spread over
several lines is silenced from its first line), as ruff's `# noqa: CODE` does. Codes may be
rule prefixes (`DDP2`), as with --select. Only what ddpify reports is silenced: edits are
still made (a comment does not stop a rewrite), and the migrated script is the same.

A suppression that silences nothing is itself reported (DDP920), so that stale comments
do not pile up: ruff's RUF100.
"""
import ast
import io
import re
import tokenize
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Optional

from ddpify import ast_walk
from ddpify.diagnostics import Diagnostic, Rule, Severity, registry
from ddpify.rules.cases import TRAINING, Emits, Silent

RULES = (
    Rule("DDP920", Severity.WARNING, "unused suppression comment",
         "A `# ddpify: ignore[CODE]` comment silences a diagnostic on its line or its "
         "statement; once the code changes (or ddpify learns to migrate the line) the comment "
         "silences nothing and would hide a future diagnostic there. Reported by --check only, "
         "like ruff's RUF100, so that writing a script never fails on a stale comment.",
         "Remove the comment, or the codes in it that the message names."),
)

UNUSED = "DDP920"
_MARKER = "ddpify:"
_SUPPRESSION = re.compile(r"#\s*ddpify:\s*ignore\b(?:\[([^\]]*)\])?", re.IGNORECASE)


@dataclass(frozen=True)
class Suppression:
    line: int
    column: int
    # Codes or prefixes; empty for a bare `# ddpify: ignore` (every code).
    codes: tuple[str, ...]

    def covers(self, code: str) -> bool:
        return not self.codes or any(code.startswith(prefix) for prefix in self.codes)


@dataclass(frozen=True)
class Filtered:
    kept: tuple[Diagnostic, ...]
    # DDP920 for each suppression (or code in one) that silenced nothing.
    unused: tuple[Diagnostic, ...]


def apply(code: str, diagnostics: Sequence[Diagnostic]) -> Filtered:
    """Drop the info and warning diagnostics that a comment in `code` silences."""
    if _MARKER not in code:  # most scripts: no tokenizing, no second parse
        return Filtered(tuple(diagnostics), ())
    suppressions = _suppressions(code)
    if not suppressions:
        return Filtered(tuple(diagnostics), ())
    by_line: dict[int, list[Suppression]] = {}
    for suppression in suppressions:
        by_line.setdefault(suppression.line, []).append(suppression)
    first_lines = _statement_first_lines(code)
    kept, used = [], set()
    for diagnostic in diagnostics:
        silencing = _silencing(diagnostic, by_line, first_lines)
        if silencing is None:
            kept.append(diagnostic)
        else:
            used.add((silencing, _matched(silencing, diagnostic.code)))
    return Filtered(tuple(kept), tuple(_unused(suppressions, used)))


def _silencing(diagnostic: Diagnostic, by_line: dict[int, list[Suppression]],
               first_lines: dict[int, int]) -> Optional[Suppression]:
    if diagnostic.severity is Severity.EDIT:
        return None
    lines = (diagnostic.line, first_lines.get(diagnostic.line, diagnostic.line))
    for line in dict.fromkeys(lines):
        for suppression in by_line.get(line, ()):
            if suppression.covers(diagnostic.code):
                return suppression
    return None


def _matched(suppression: Suppression, code: str) -> str:
    """Which of the suppression's codes silenced `code` ("" for a bare one)."""
    return next((prefix for prefix in suppression.codes if code.startswith(prefix)), "")


def _unused(suppressions: Iterable[Suppression], used: set) -> Iterable[Diagnostic]:
    for suppression in suppressions:
        if not suppression.codes:
            if (suppression, "") not in used:
                yield _report(suppression, "unused suppression: nothing is reported here")
            continue
        for prefix in suppression.codes:
            if (suppression, prefix) in used:
                continue
            yield _report(suppression, f"unused suppression: {_why_unused(prefix)}")


def _why_unused(prefix: str) -> str:
    rules = registry()
    known = [code for code in rules if code.startswith(prefix)]
    if not known:
        return f"{prefix} is no rule code (see ddpify --list-rules)"
    if all(rules[code].removed for code in known):
        return f"{prefix} is retired and never reported"
    if all(rules[code].severity is Severity.EDIT for code in known):
        return f"{prefix} is a rewrite, which a comment does not stop"
    return f"no {prefix} diagnostic on this line or its statement"


def _report(suppression: Suppression, message: str) -> Diagnostic:
    return Diagnostic(UNUSED, suppression.line, suppression.column, message)


def _suppressions(code: str) -> list[Suppression]:
    found = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(code).readline):
            if token.type != tokenize.COMMENT:
                continue
            match = _SUPPRESSION.search(token.string)
            if match is None:
                continue
            listed = match.group(1)
            codes = () if listed is None else tuple(
                part.strip().upper() for part in listed.split(",") if part.strip())
            found.append(Suppression(token.start[0], token.start[1] + 1, codes))
    except (tokenize.TokenError, SyntaxError):  # the migration itself reports a bad source
        return []
    return found


def _statement_first_lines(code: str) -> dict[int, int]:
    """Each line of a statement that spans several -> the statement's first line. The
    innermost statement wins, so a line of a loop's body maps to its own statement."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError):
        return {}
    first_lines: dict[int, int] = {}
    statements = sorted((node for node in ast_walk.walk(tree) if isinstance(node, ast.stmt)),
                        key=lambda node: node.lineno)
    # Outer statements first, so that inner ones take back the lines they hold.
    for statement in statements:
        end = getattr(statement, "end_lineno", None) or statement.lineno
        for line in range(statement.lineno, end + 1):
            first_lines[line] = statement.lineno
    return first_lines


CASES = (
    Emits(TRAINING.replace("model = torch.nn.Linear(4, 1).to(device)",
                           "model = torch.nn.Linear(4, 1).to(device)  # ddpify: ignore[DDP207]"), "DDP920"),
    Silent(TRAINING.replace("shuffle=True)", "sampler=BalancedSampler(dataset))  # ddpify: ignore[DDP207]")
           .replace("from torch.utils", "from sampling import BalancedSampler\nfrom torch.utils"), "DDP920"),
)
