"""Rewrite every fixture's expected.py and expected.txt from ddpify's current output.

Run it after a deliberate change, then review `git diff fixtures/` line by line: the
fixtures are the spec, so every changed line must be one an expert would sign off.

    python tests/regenerate_fixtures.py [CASE ...]
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fixture_cases import all_cases, format_diagnostics  # noqa: E402


def main(names) -> None:
    for case in all_cases():
        if names and case.name not in names:
            continue
        result = case.migrate()
        case.expected.write_text(result.code)
        case.expected_diagnostics.write_text(format_diagnostics(result.diagnostics))
        print(f"regenerated {case.name}")


if __name__ == "__main__":
    main(sys.argv[1:])
