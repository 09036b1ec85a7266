import sys
from pathlib import Path

import pytest

# The helpers beside the tests (fixture_cases, script_runs) import as plain modules.
sys.path.insert(0, str(Path(__file__).resolve().parent))

# A pytest fixture several test modules ask for by name: defined once, offered here.
from cli_support import needs_a_person  # noqa: E402,F401


def pytest_itemcollected(item):
    """Under pytest-xdist (setup.cfg runs `-n auto --dist loadgroup`), every test of one
    fixture goes to the same worker: fixture_cases and project_cases migrate each fixture once
    per process and the other checks of that fixture reuse the result, so spreading a
    fixture's checks over workers would migrate it once in each.

    The mark goes on as each test is collected, before any `pytest_collection_modifyitems`
    (xdist's worker reads the marks in its own). xdist groups by appending the group to the
    test's id, which pytest 9.2 no longer lets it do: setup.cfg keeps pytest below 9.2, and
    test_fixtures.py checks the grouping took effect."""
    params = getattr(item, "callspec", None)
    for key in ("case", "project"):
        value = params.params.get(key) if params else None
        if value is not None and hasattr(value, "name"):
            item.add_marker(pytest.mark.xdist_group(f"{key}:{value.name}"))
