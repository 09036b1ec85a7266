"""Where the fixtures live and how one is read: shared by the tests and the regenerator.

Fixtures are grouped by rule family: `fixtures/<family>/<idiom>/` (fixtures/README.md). A
case is named by its idiom alone (idiom names are unique across families), so pytest ids and
`python tests/regenerate_fixtures.py NAME` stay short; `Case.path` is `family/idiom`.
"""
import json
import shlex
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Optional

from ddpify.api import Result, migrate_source
from ddpify.options import Options
from ddpify.project import Project
from ddpify.project import read as read_project

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


@dataclass
class Case:
    directory: Path

    @property
    def name(self) -> str:
        """The idiom: the fixture's folder name."""
        return self.directory.name

    @property
    def family(self) -> str:
        """The rule family the fixture belongs to: the folder above the idiom's."""
        return self.directory.parent.name

    @property
    def path(self) -> str:
        """`family/idiom`, relative to fixtures/."""
        return f"{self.family}/{self.name}"

    @property
    def input(self) -> Path:
        return self.directory / "input.py"

    @property
    def expected(self) -> Path:
        return self.directory / "expected.py"

    @property
    def expected_diagnostics(self) -> Path:
        return self.directory / "expected.txt"

    @property
    def options(self) -> Options:
        return read_options(self.directory)

    @property
    def project(self) -> Project:
        """What the helper modules beside input.py (a fixture's own utils.py) do."""
        return read_project(str(self.input), self.input.read_text())

    def migrate(self, text: Optional[str] = None) -> Result:
        """ddpify on input.py (or on `text`, as if it sat there), as the command line runs it.
        Several tests migrate every fixture (output, diagnostics, removed codes): the result
        for a given text is computed once per test session."""
        return _migrated(self.directory, self.input.read_text() if text is None else text)

    @property
    def run_spec(self) -> Optional[dict]:
        """`run.json` marks a fixture that runs on CPU: {"args": [...], "files": [...], "evaluation": "regex"}.

        "env": variables for the three runs (TORCH_COMPILE_DISABLE=1 where compiling on the
        CPU would take minutes; the compiled run has a test of its own). "dcp": checkpoint
        folders written by dcp.save; "needs": modules the run needs that torch does not install.

        "training_fetches": true checks that each training pass under torchrun is this rank's
        share and changes from epoch to epoch (tests/script_runs.py, problems_training_fetches).

        "evaluation", a regex matching the lines that print evaluation figures, runs the
        evaluation check as well (tests/script_runs.py, problems_evaluation_*).

        Every run logs the files each rank writes under torchrun and checks that no two ranks
        write one file (tests/script_runs.py, problems_one_writer); "one_writer": "reason" opts
        out, saying why the check cannot hold for this fixture.
        """
        path = self.directory / "run.json"
        return json.loads(path.read_text()) if path.exists() else None


def _value_of(flag: str, flags: list[str]) -> Optional[str]:
    """The value after `flag` (`--strategy fsdp2`), or None when the flag is absent."""
    return flags[flags.index(flag) + 1] if flag in flags[:-1] else None


def read_options(directory: Path) -> Options:
    """A fixture's `options` file holds CLI flags, e.g. `--sync-batchnorm` or `--strategy fsdp2`."""
    path = directory / "options"
    flags = shlex.split(path.read_text()) if path.exists() else []
    return Options(
        sync_batchnorm="--sync-batchnorm" in flags,
        keep_global_batch="--keep-global-batch" in flags,
        shard_evaluation="--no-shard-eval" not in flags,
        strategy=_value_of("--strategy", flags) or "ddp",
        fsdp_blocks=_value_of("--fsdp-blocks", flags),
        checkpoint=_value_of("--checkpoint", flags) or "full",
    )


def all_cases() -> list[Case]:
    """Every fixture, `fixtures/<family>/<idiom>/`, in family then idiom order."""
    return [Case(path) for family in sorted(FIXTURES.iterdir()) if family.is_dir()
            for path in sorted(family.iterdir()) if (path / "input.py").exists()]


def format_diagnostics(diagnostics, path: str = "input.py") -> str:
    """Every diagnostic of the run, edits included, in the result's order, as `expected.txt`
    stores them: `input.py:LINE:COL: CODE message` (a project fixture names each module by
    its path in the tree). With the edits listed, a rule's code leads to the fixtures that
    show it (`grep -rl DDP201 fixtures`)."""
    return "".join(diagnostic.format(path) + "\n" for diagnostic in diagnostics)


@cache
def _migrated(directory: Path, text: str) -> Result:
    case = Case(directory)
    return migrate_source(text, case.options, case.project)


# Checks that repeat a whole migration or a process per fixture run on one fixture in
# FAST_SAMPLE in the fast tier (`-m "not slow"`); the others are marked slow, and CI runs both.
FAST_SAMPLE = 4


def slow_unless_sampled(index: int) -> list:
    """The marks for the index-th fixture of such a check."""
    import pytest
    return [] if index % FAST_SAMPLE == 0 else [pytest.mark.slow]
