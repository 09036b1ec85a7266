"""Two rules never edit the same node: a rewrite of an expression or a replacement of a
statement belongs to one rule, and a later rule must not overwrite it unseen (issue 16).

The watch wraps each rule's plan step and compares the edits it found with those it left.
"""
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from fixture_cases import all_cases

from ddpify import api
from ddpify.api import migrate_source
from ddpify.rules import CONCERNS
from ddpify.rules.registry import RULES

# Edits keyed by node that hold one rewrite each: a second writer would replace the first.
SINGLE_WRITER_EDITS = ("expressions", "replaced", "guarded", "finally_bodies")
# Rewrites a later rule makes on purpose, reading the earlier one: a write into a machine's own
# temporary folder keeps its guard's place, but the rank-0 guard an earlier rule gave it becomes
# each machine's local rank 0 (rules/machine_local.py reads edits.guarded to find them).
NARROWS_AN_EARLIER_EDIT = {("ddpify.rules.machine_local", "guarded")}


@contextmanager
def watching_clashes(concerns, monkeypatch) -> Iterator[list]:
    """Collect (rule, edit kind, node) for each edit a rule overwrote that an earlier rule made."""
    clashes: list = []

    def watched(concern):
        plan = concern.plan

        def plan_and_check(facts, edits, setup):
            earlier = {kind: dict(getattr(edits, kind)) for kind in SINGLE_WRITER_EDITS}
            plan(facts, edits, setup)
            for kind, made in earlier.items():
                now = getattr(edits, kind)
                if (concern.__name__, kind) in NARROWS_AN_EARLIER_EDIT:
                    continue
                clashes.extend((concern.__name__, kind, node) for node, edit in made.items()
                               if node in now and now[node] is not edit)
        return plan_and_check

    for concern in concerns:
        monkeypatch.setattr(concern, "plan", watched(concern))
    yield clashes


@pytest.mark.slow  # every fixture migrated a second time, watched (about 17 s)
def test_no_two_rules_edit_the_same_node_in_any_fixture(monkeypatch):
    """Also: a removed rule stays listed so that its code is never reused, and is never
    reported. The same walk over every fixture looks at every diagnostic (expected.txt could
    be stale), so the fixtures are migrated once for both checks, not twice."""
    removed = {code for code, rule in RULES.items() if rule.removed}
    assert removed == {"DDP006", "DDP311"}
    emitted = {}
    with watching_clashes(CONCERNS, monkeypatch) as clashes:
        for case in all_cases():
            # Not case.migrate(), whose results are cached: the rules must run here, watched.
            result = migrate_source(case.input.read_text(), case.options, case.project)
            for diagnostic in (*result.diagnostics, *result.unused_suppressions):
                emitted.setdefault(diagnostic.code, case.path)
    assert clashes == []
    assert {code: where for code, where in emitted.items() if code in removed} == {}


class _FirstRule:
    @staticmethod
    def plan(facts, edits, setup):
        edits.expressions[facts.loaders[0].call] = lambda node: node


class _SecondRule:
    @staticmethod
    def plan(facts, edits, setup):
        edits.expressions[facts.loaders[0].call] = lambda node: node


def test_the_watch_catches_a_clash(monkeypatch):
    """Two made-up rules that rewrite the same DataLoader call: the watch must report it."""
    source = (
        "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n"
        "model = torch.nn.Linear(4, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=4)\n"
        "hidden = torch.zeros(1)\n"  # keeps the script on the CPU: one migration, not a second placed one
        "for epoch in range(2):\n    for x, y in loader:\n"
        "        loss = torch.nn.functional.mse_loss(model(x) + hidden, y)\n"
        "        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()\n"
    )
    monkeypatch.setattr(api, "CONCERNS", (_FirstRule, _SecondRule))
    with watching_clashes((_FirstRule, _SecondRule), monkeypatch) as clashes:
        api.migrate_source(source)
    assert [(rule, kind) for rule, kind, _ in clashes] == [("_SecondRule", "expressions")]
