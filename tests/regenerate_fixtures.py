"""Rewrite every fixture's expected.py and expected.txt from ddpify's current output.

Run it after a deliberate change, then review `git diff fixtures/` line by line: the
fixtures are the spec, so every changed line must be one an expert would sign off.

    python tests/regenerate_fixtures.py [NAME ...]

A NAME is an idiom (`guide_image_classifier`), a `family/idiom` path
(`guide/guide_image_classifier`) or a whole family (`data`); none means every fixture.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fixture_cases import all_cases, format_diagnostics  # noqa: E402


def main(names) -> None:
    cases = all_cases()
    unknown = sorted(set(names) - {key for case in cases for key in (case.name, case.path, case.family)})
    if unknown:
        raise SystemExit(f"no fixture or family named: {', '.join(unknown)}")
    for case in cases:
        if names and not {case.name, case.path, case.family} & set(names):
            continue
        result = case.migrate()
        case.expected.write_text(result.code)
        case.expected_diagnostics.write_text(format_diagnostics(result.diagnostics))
        print(f"regenerated {case.path}")


if __name__ == "__main__":
    main(sys.argv[1:])
