"""Project fixtures are the spec for projects: fixtures/projects/<idiom>/ (tests/project_cases.py).

The same checks as single-file fixtures (tests/test_fixtures.py), module by module: each
expected module is the migration byte for byte, the diagnostics are expected.txt, every
module compiles and migrates to itself, and the whole migrated tree imports without joining
a process group. The slow runs start the entry scripts with python and torchrun.
"""
import os
from functools import cache
from pathlib import Path

import pytest
from fixture_cases import all_cases, slow_unless_sampled
from project_cases import all_project_cases, format_project_diagnostics
from script_runs import (
    checks_one_writer,
    evaluation_log,
    problems_distributed,
    problems_evaluation_fetches,
    problems_evaluation_lines,
    problems_one_writer,
    problems_other_ranks_silent,
    problems_single_process,
    problems_training_fetches,
    run_python,
    run_three_ways,
    writes_env,
)

from ddpify.project import path_folders

PROJECTS = all_project_cases()
BY_NAME = {project.name: project for project in PROJECTS}
SAMPLED = [pytest.param(project, id=project.name, marks=slow_unless_sampled(index))
           for index, project in enumerate(PROJECTS)]
# A python process per project (half a second, most of it importing torch) is sampled twice
# as sparsely: one project in 2 * FAST_SAMPLE in the fast tier, every one in CI's slow tier.
SAMPLED_PROCESSES = [pytest.param(project, id=project.name,
                                   marks=slow_unless_sampled(index // 2 if index % 2 == 0 else 1))
                     for index, project in enumerate(PROJECTS)]

# Known defects of the migration these fixtures show (the fixture stays as ddpify writes it;
# the core is to change): (idiom, entry) -> why the run fails.
RUN_DEFECTS: dict[tuple[str, str], str] = {}
EVALUATION_DEFECTS: dict[tuple[str, str], str] = {}


@cache
def migrated(name: str, tree: str):
    """The migration of one fixture's tree ("input" or "expected"), computed once per run."""
    project = BY_NAME[name]
    return project.migrate(project.directory / tree)


def test_project_fixtures_exist_and_have_names_of_their_own():
    assert len(PROJECTS) >= 6
    single = {case.name for case in all_cases()}
    assert single.isdisjoint(BY_NAME)


@pytest.mark.parametrize("project", PROJECTS, ids=lambda project: project.name)
def test_each_expected_module_matches_its_migration(project):
    expected = {module: (project.expected / module).read_text() for module in project.modules(project.expected)}
    assert {module: result.code for module, result in migrated(project.name, "input").items()} == expected


@pytest.mark.parametrize("project", PROJECTS, ids=lambda project: project.name)
def test_project_diagnostics_match_expected(project):
    assert format_project_diagnostics(migrated(project.name, "input")) == project.expected_diagnostics.read_text()


@pytest.mark.parametrize("project", PROJECTS, ids=lambda project: project.name)
def test_expected_modules_compile(project):
    for module in project.modules(project.expected):
        path = project.expected / module
        compile(path.read_text(), str(path), "exec")


# A second migration of every tree: sampled in the fast tier (fixture_cases.slow_unless_sampled).
@pytest.mark.parametrize("project", SAMPLED)
def test_migrating_the_expected_tree_changes_nothing(project):
    again = {module: result.code for module, result in migrated(project.name, "expected").items()}
    assert again == {module: (project.expected / module).read_text() for module in again}


# Imports each module named on the command line as the project's other modules would, from the
# tree's root: `importlib`, not runpy.run_path, because a package's modules need their package
# (`from .base import BaseTrainer`). __name__ is never "__main__" this way.
IMPORT_ALL = """\
import importlib, os, sys
import torch.distributed as dist
sys.dont_write_bytecode = True  # no __pycache__ left in the fixture
sys.path[:0] = sys.argv[1].split(os.pathsep)  # the tree, and the folders its scripts put on sys.path
for name in sys.argv[2:]:
    importlib.import_module(name)
    print(name, "joined a process group" if dist.is_initialized() else "single process")
"""


def dotted(module: str) -> str:
    parts = list(Path(module).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def importable(tree: Path, modules: list[str]) -> list[str]:
    """The modules of a tree that something may import: all but a top-level script with no
    `__main__` guard that no module of the tree imports (a newcomer's train.py that trains
    as it runs; importing it would train, and its run is what run.json is for)."""
    import re
    texts = {module: (tree / module).read_text() for module in modules}

    def imported(name: str) -> bool:
        pattern = rf"^\s*(from\s+{re.escape(name)}\s+import|import\s+{re.escape(name)}\b)"
        return any(re.search(pattern, text, re.MULTILINE) for other, text in texts.items() if other != name + ".py")

    return [module for module in modules
            if "/" in module or "__name__" in texts[module] or imported(module[:-len(".py")])]


# A process per project: sampled in the fast tier (SAMPLED_PROCESSES).
@pytest.mark.parametrize("project", SAMPLED_PROCESSES)
def test_every_expected_module_imports_without_joining_a_group(project, tmp_path):
    importer = tmp_path / "importer" / "import_all.py"
    importer.parent.mkdir()
    importer.write_text(IMPORT_ALL)
    # (A tree's own top-level `__init__.py`, a cloned repository's, is no module of it.)
    names = [name for name in map(dotted, importable(project.expected, project.modules(project.expected)))
             if name]
    # (`sys.path.append('core')` in a script names a folder of the tree: on sys.path as it runs.)
    folders = [str(project.expected), *map(str, path_folders(project.expected.resolve()))]
    # (`python tools/train.py` puts tools/ on sys.path: a folder of scripts, no `__init__.py`,
    # whose `import _init_paths` is found there.)
    folders += sorted({str(project.expected / Path(name).parent) for name in project.modules(project.expected)
                       if "/" in name and not (project.expected / Path(name).parent / "__init__.py").is_file()}
                      - set(folders))
    run = run_python(importer, tmp_path / "run", [os.pathsep.join(folders), *names])  # no WORLD_SIZE
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.lines == [f"{name} single process" for name in names]


def _runs(defects: dict, evaluation_only: bool = False) -> list:
    params = []
    for project in PROJECTS:
        for spec in project.runs():
            if evaluation_only and "evaluation" not in spec:
                continue
            key = (project.name, spec["entry"])
            marks = [pytest.mark.xfail(strict=True, reason=defects[key])] if key in defects else []
            params.append(pytest.param(project, spec, id=f"{project.name}/{spec['entry']}", marks=marks))
    return params


@pytest.fixture(scope="module")
def project_runs(tmp_path_factory):
    """Runs each (project, entry) once for the tests that judge it: the entry of input/ with
    python, of expected/ with python and under torchrun, each rank's output apart (stdout is
    rank 0's). torchrun runs under the fetch log (tests/eval_site), which the training check
    reads; a run with "evaluation" runs all three under it, as single-file fixtures do, so
    that their figures compare."""
    done: dict = {}

    def runs(project, spec):
        # (One entry may run twice, with other arguments: `--mode test`.)
        key = (project.name, spec["entry"], tuple(spec.get("args", ())))
        if key not in done:
            workdir = tmp_path_factory.mktemp(f"{project.name}-{Path(spec['entry']).stem}")
            logged = ("original", "single", "torchrun") if "evaluation" in spec else ("torchrun",)
            done[key] = run_three_ways(project.input / spec["entry"], project.expected / spec["entry"],
                                       workdir, spec.get("args", []), logged, rank_logs=True,
                                       extra_env=writes_env() if checks_one_writer(spec) else None)
        return done[key]

    return runs


@pytest.mark.slow
@pytest.mark.parametrize(("project", "spec"), _runs(RUN_DEFECTS))
def test_projects_run_under_python_and_torchrun(project, spec, project_runs):
    original, single, distributed = project_runs(project, spec)
    assert problems_single_process(original, single) == []
    assert problems_distributed(original, distributed, spec.get("files", [])) == []
    assert problems_other_ranks_silent(distributed) == []
    if spec.get("trains", True):
        assert problems_training_fetches(evaluation_log(distributed.workdir), 2) == []
    if checks_one_writer(spec):
        assert problems_one_writer(distributed.workdir) == []


@pytest.mark.slow
@pytest.mark.parametrize(("project", "spec"), _runs(EVALUATION_DEFECTS, evaluation_only=True))
def test_projects_evaluation_is_sharded_and_gathered(project, spec, project_runs):
    original, _, distributed = project_runs(project, spec)
    assert distributed.returncode == 0, distributed.stderr[-3000:]
    assert problems_evaluation_fetches(evaluation_log(original.workdir), 1) == []
    assert problems_evaluation_fetches(evaluation_log(distributed.workdir), 2) == []
    assert problems_evaluation_lines(original, distributed, spec["evaluation"]) == []


@pytest.mark.parametrize("project", PROJECTS, ids=lambda project: project.name)
def test_expected_modules_import_nothing_torch_does_not_install(project):
    """CI's environment has torch alone (no numpy, no Pillow, no tensorboard), and the import
    check above runs there: a module that imports them at its top fails it. Checked by reading,
    so that a machine that has them (torchvision brings numpy) catches it too."""
    import re
    found = [module for module in project.modules(project.expected) if re.search(
        r"^(import|from) (numpy|PIL|pandas|matplotlib|scipy|sklearn|torchvision|tensorboard|wandb|h5py"
        r"|torch\.utils\.tensorboard)\b", (project.expected / module).read_text(),
        re.MULTILINE)]
    assert found == []
