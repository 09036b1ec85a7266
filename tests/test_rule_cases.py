"""Every rule unit's own cases (`CASES` at the end of ddpify/rules/*.py, selfcheck/rules.py
and suppressions.py), run through migrate_source: a case that emits its code (and writes
what it should), a no-op case that does not."""
import hashlib
from collections import Counter
from functools import cache
from types import SimpleNamespace

import pytest

from ddpify import selfcheck
from ddpify.api import migrate_source
from ddpify.diagnostics import Rule, Severity
from ddpify.rules.cases import Emits, Flags, Silent
from ddpify.rules.registry import RULES, UNITS, DuplicateCode, cases, collect, unit_name

CASES = cases()


def _id(entry) -> str:
    unit, index, case = entry
    return f"{unit}-{case.code}-{index}"


@cache
def _emitted(source: str, options) -> tuple[frozenset[str], str]:
    """The codes and the output of one source: several cases read the same source (an Emits
    and a Silent of two codes), migrated once per worker."""
    result = migrate_source(source, options)
    return frozenset(d.code for d in (*result.diagnostics, *result.unused_suppressions)), result.code


def _params() -> list:
    """The cases, those that share a source grouped on one xdist worker (tests/conftest.py
    groups a fixture's checks the same way), so that _emitted migrates it once."""
    keys = [None if isinstance(case, Flags) else (case.source, case.options) for _unit, _index, case in CASES]
    shared = Counter(key for key in keys if key is not None)
    params = []
    for entry, key in zip(CASES, keys):
        marks = []
        if key is not None and shared[key] > 1:
            digest = hashlib.sha256(f"{key[0]}{key[1]!r}".encode()).hexdigest()[:16]
            marks.append(pytest.mark.xdist_group(f"rule-source:{digest}"))
        params.append(pytest.param(entry, id=_id(entry), marks=marks))
    return params


@pytest.mark.parametrize("entry", _params())
def test_rule_case(entry):
    _unit, _index, case = entry
    if isinstance(case, Flags):
        found = {d.code for d in selfcheck.check(case.original, case.migrated, [])}
        assert case.code in found
        return
    codes, output = _emitted(case.source, case.options)
    if isinstance(case, Silent):
        assert case.code not in codes
        return
    assert case.code in codes, f"{case.code} not emitted; emitted: {sorted(codes)}"
    for snippet in case.output_contains:
        assert snippet in output, f"{snippet!r} not in the output:\n{output}"


# Rules no unit case emits yet, with the reason; drop a code from here when a case shows it.
WITHOUT_A_CASE = {
    "DDP954": "self-check: finds what the placement (DDP016) let through, which no source's placement does: "
              "broken placed outputs in tests/test_gpu_placement.py",
    "DDP949": "self-check: finds what the placement (DDP016) let through, which no source's placement does: "
              "broken placed outputs in tests/test_gpu_placement.py",
    "DDP012": "needs a helper module the script imports, which a single-source case cannot give: "
              "fixtures projects/gpu_*_at_import_take*_this_ranks_gpu",
    "DDP938": "self-check: needs the migration's DDP203 naming the loader, which a Flags case cannot give: "
              "broken outputs of fixtures data/step_* and data/bound_step_* in tests/test_selfcheck.py",
    "DDP212": "download out of the setup's scope: the short shapes tried got DDP209 (the barrier) "
              "instead; tests/test_data_transform.py has one",
    "DDP311": "a helper of another module prints: a case is one file, with no Project",
    "DDP918": "a module in a project's folder: a case is one file, with no Project "
              "(fixtures helper_modules/*_no_caller_in_view show it)",
    "DDP404": "accumulation that no_sync() cannot wrap: no test or fixture reaches it either",
    "DDP921": "a training class of another module of the project: a case is one file, with no Project "
              "(fixtures projects/trainer_chosen_between_project_and_optional_class shows it)",
    "DDP315": "a function of another module of the project names a folder from the clock: a case is one "
              "file, with no Project (fixtures projects/run_folder_from_clock_in_*_before_setup_reported "
              "show it)",
    "DDP221": "a rank-aware batch sampler of another module of the project: a case is one file, with no "
              "Project, and one defined in the script makes it DDP900 (fixtures "
              "projects/rank_aware_batch_sampler_of_its_own_module shows it)",
}


def test_every_active_rule_has_a_case_that_emits_it():
    emitted = {case.code for _unit, _index, case in CASES if isinstance(case, (Emits, Flags))}
    active = {code for code, rule in RULES.items() if not rule.removed}
    assert sorted(active - emitted - set(WITHOUT_A_CASE)) == [], "a rule with neither a case nor a reason"
    assert sorted(set(WITHOUT_A_CASE) & emitted) == [], "a case shows it now: drop it from WITHOUT_A_CASE"


def test_cases_name_known_codes_and_never_emit_a_removed_one():
    assert sorted({case.code for _u, _i, case in CASES} - set(RULES)) == []
    assert [case for _u, _i, case in CASES if isinstance(case, Emits) and RULES[case.code].removed] == []


def test_every_unit_has_cases_and_a_name_of_its_own():
    names = [unit_name(unit) for unit in UNITS]
    assert len(names) == len(set(names))
    assert [name for name, unit in zip(names, UNITS) if not unit.CASES] == []


def test_a_code_defined_twice_fails_loudly():
    rule = Rule("DDP999", Severity.INFO, "x", "y", "z")
    first, second = SimpleNamespace(__name__="a", RULES=(rule,)), SimpleNamespace(__name__="b", RULES=(rule,))
    with pytest.raises(DuplicateCode, match="DDP999 is defined in both a and b"):
        collect([first, second])
