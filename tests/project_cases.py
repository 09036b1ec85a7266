"""Project fixtures: a small training project per idiom, migrated module by module (issue 20).

`fixtures/projects/<idiom>/` holds

- `input/`: the single-process project, an entry script and the modules and packages it
  imports, laid out as a real project is (`train.py`, `data.py`, `trainer/base.py`...);
- `expected/`: ddpify's output for every `.py` of `input/`, changed or not, at the same path;
- `expected.txt`: every diagnostic of every module, in the order of the modules' paths, each
  line naming its module by its path in the tree (`data.py:12:5: DDP201 ...`);
- optional `options` (command-line flags, as for single-file fixtures) and `run.json`: one
  run, or a list of runs for a project with several entry scripts, each
  `{"entry": "train.py", "args": [...], "files": [...], "evaluation": "regex"}` with the
  meaning of a single-file run.json (tests/fixture_cases.py).

Each module is migrated as the command line migrates it: `migrate_source` with the project
view read around the module's own path (`ddpify.project.read`), so `expected/` is what
`ddpify input/ -o OUT_DIR/` writes. Idiom names are unique across all fixtures.
"""
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from fixture_cases import FIXTURES, format_diagnostics, read_options

from ddpify.api import Result, migrate_source
from ddpify.options import Options
from ddpify.project import read as read_project

PROJECTS = FIXTURES / "projects"


@dataclass
class ProjectCase:
    directory: Path

    @property
    def name(self) -> str:
        return self.directory.name

    @property
    def path(self) -> str:
        """`projects/idiom`, relative to fixtures/."""
        return f"{PROJECTS.name}/{self.name}"

    @property
    def input(self) -> Path:
        return self.directory / "input"

    @property
    def expected(self) -> Path:
        return self.directory / "expected"

    @property
    def expected_diagnostics(self) -> Path:
        return self.directory / "expected.txt"

    @property
    def options(self) -> Options:
        return read_options(self.directory)

    def modules(self, tree: Optional[Path] = None) -> list[str]:
        """Every `.py` of the tree (input/ by default), by its path in it, sorted."""
        root = self.input if tree is None else tree
        return sorted(str(path.relative_to(root)) for path in root.rglob("*.py")
                      if "__pycache__" not in path.parts)

    def migrate(self, tree: Optional[Path] = None) -> dict[str, Result]:
        """ddpify on every module of the tree (input/ by default), each with its project view."""
        root = self.input if tree is None else tree
        results = {}
        # One run migrates them all, as `ddpify input/ -o OUT_DIR/` does (project.read).
        together = [str(root / module) for module in self.modules(root)]
        for module in self.modules(root):
            path = root / module
            text = path.read_text()
            results[module] = migrate_source(text, self.options, read_project(str(path), text, together))
        return results

    def runs(self) -> list[dict]:
        """What run.json says to run ([] when the project does not run on CPU)."""
        path = self.directory / "run.json"
        if not path.exists():
            return []
        spec = json.loads(path.read_text())
        return spec if isinstance(spec, list) else [spec]


def all_project_cases() -> list[ProjectCase]:
    return [ProjectCase(path) for path in sorted(PROJECTS.iterdir())
            if (path / "input").is_dir()] if PROJECTS.is_dir() else []


def format_project_diagnostics(results: dict[str, Result]) -> str:
    """The diagnostics of every module, as expected.txt stores them."""
    return "".join(format_diagnostics(result.diagnostics, module) for module, result in results.items())
