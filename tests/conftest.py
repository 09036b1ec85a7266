import sys
from pathlib import Path

# The helpers beside the tests (fixture_cases, script_runs) import as plain modules.
sys.path.insert(0, str(Path(__file__).resolve().parent))
