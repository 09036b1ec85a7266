"""The README is for newcomers: its rules table must match the registry."""
from pathlib import Path

from ddpify.diagnostics import RULES

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def test_rules_table_lists_every_rule_with_its_summary():
    for rule in RULES.values():
        row = f"| {rule.code} | {rule.severity.value} | {rule.summary.replace('|', chr(92) + '|')} |"
        assert row in README, f"README rules table lacks or misstates {rule.code}"


def test_rules_table_lists_no_unknown_rule():
    codes = {line.split("|")[1].strip() for line in README.splitlines() if line.startswith("| DDP")}
    assert codes == set(RULES)
