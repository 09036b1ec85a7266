import sys
from pathlib import Path

# The helpers beside the tests (fixture_cases, script_runs) import as plain modules.
sys.path.insert(0, str(Path(__file__).resolve().parent))

# A pytest fixture several test modules ask for by name: defined once, offered here.
from cli_support import needs_a_person  # noqa: E402,F401
