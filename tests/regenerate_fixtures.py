"""Rewrite every fixture's expected.py and expected.txt from ddpify's current output.

Run it after a deliberate change, then review `git diff fixtures/` line by line: the
fixtures are the spec, so every changed line must be one an expert would sign off.

    python tests/regenerate_fixtures.py [NAME ...]

A NAME is an idiom (`guide_image_classifier`), a `family/idiom` path
(`guide/guide_image_classifier`, `projects/trainer_package`) or a whole family (`data`,
`projects`); none means every fixture. A project fixture's `expected/` is written whole
(every module, changed or not), and modules no longer in `input/` are removed from it.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fixture_cases import all_cases, format_diagnostics  # noqa: E402
from project_cases import PROJECTS, ProjectCase, all_project_cases, format_project_diagnostics  # noqa: E402


def main(names) -> None:
    cases = all_cases()
    projects = all_project_cases()
    keys = {key for case in cases for key in (case.name, case.path, case.family)}
    keys |= {key for project in projects for key in (project.name, project.path, PROJECTS.name)}
    unknown = sorted(set(names) - keys)
    if unknown:
        raise SystemExit(f"no fixture or family named: {', '.join(unknown)}")
    for case in cases:
        if names and not {case.name, case.path, case.family} & set(names):
            continue
        result = case.migrate()
        case.expected.write_text(result.code)
        case.expected_diagnostics.write_text(format_diagnostics(result.diagnostics))
        print(f"regenerated {case.path}")
    for project in projects:
        if names and not {project.name, project.path, PROJECTS.name} & set(names):
            continue
        regenerate_project(project)
        print(f"regenerated {project.path}")


def regenerate_project(project: ProjectCase) -> None:
    results = project.migrate()
    if project.expected.is_dir():
        for stale in set(project.modules(project.expected)) - set(results):
            (project.expected / stale).unlink()
    for module, result in results.items():
        target = project.expected / module
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(result.code)
    project.expected_diagnostics.write_text(format_project_diagnostics(results))


if __name__ == "__main__":
    main(sys.argv[1:])
