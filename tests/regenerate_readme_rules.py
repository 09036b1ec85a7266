"""Rewrite the README's rules table from the registry (tests/test_readme.py checks it).

    python tests/regenerate_readme_rules.py
"""
from pathlib import Path

from ddpify.diagnostics import Rule
from ddpify.rules.registry import RULES

README = Path(__file__).resolve().parent.parent / "README.md"
HEADER = ["| code | severity | summary |", "| --- | --- | --- |"]


def rules_table() -> list:
    return HEADER + [row(rule) for rule in sorted(RULES.values(), key=lambda rule: rule.code)]


def row(rule: Rule) -> str:
    """A removed rule shows `removed` where the others show their severity."""
    severity = "removed" if rule.removed else rule.severity.value
    return f"| {rule.code} | {severity} | {rule.summary.replace('|', chr(92) + '|')} |"


def main() -> None:
    lines = README.read_text().split("\n")
    start = lines.index(HEADER[0])
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    lines[start:end] = rules_table()
    README.write_text("\n".join(lines))


if __name__ == "__main__":
    main()
