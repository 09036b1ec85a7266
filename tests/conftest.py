import sys
from pathlib import Path

import pytest

# The helpers beside the tests (fixture_cases, script_runs) import as plain modules.
sys.path.insert(0, str(Path(__file__).resolve().parent))

# A pytest fixture several test modules ask for by name: defined once, offered here.
from cli_support import needs_a_person  # noqa: E402,F401


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (setup.cfg runs `-n auto --dist loadgroup`), every test of one
    fixture goes to the same worker: fixture_cases and project_cases migrate each fixture once
    per process and the other checks of that fixture reuse the result, so spreading a
    fixture's checks over workers would migrate it once in each."""
    for item in items:
        params = getattr(item, "callspec", None)
        for key in ("case", "project"):
            value = params.params.get(key) if params else None
            if value is not None and hasattr(value, "name"):
                item.add_marker(pytest.mark.xdist_group(f"{key}:{value.name}"))
