"""Which files form a project (ddpify/project_files.py): the entry and the project's own
modules it imports, transitively, never anything installed or outside the project root."""
import textwrap
from pathlib import Path

from ddpify.project_files import files_of, project_root


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def _names(root: Path, found) -> list[str]:
    return [path.relative_to(root.resolve()).as_posix() for path in found]


def test_every_kind_of_import_is_followed(tmp_path):
    root = _tree(tmp_path / "proj", {
        "train.py": """\
            import utils
            import json
            from model import Net
            from trainer.loop import Trainer
            from engines import *
            import metrics.scores as scores
            """,
        "utils.py": "import torch\n",
        "model.py": "from layers import Block\n",
        "layers.py": "",
        "trainer/__init__.py": "from .loop import Trainer\nfrom .hooks import *\n",
        "trainer/loop.py": "from . import state\nfrom ..utils import x\n",
        "trainer/state.py": "",
        "trainer/hooks.py": "",
        "engines.py": "",
        "metrics/__init__.py": "",
        "metrics/scores.py": "",
        "unused.py": "",
    })
    assert _names(root, files_of(root / "train.py")) == [
        "train.py", "utils.py", "model.py", "trainer/__init__.py", "trainer/loop.py",
        "engines.py", "metrics/__init__.py", "metrics/scores.py", "layers.py",
        "trainer/hooks.py", "trainer/state.py"]


def test_a_module_of_a_package_named_in_from_import(tmp_path):
    root = _tree(tmp_path / "proj", {
        "train.py": "from pkg.sub import mod\nfrom pkg import helper_function\n",
        "pkg/__init__.py": "def helper_function():\n    pass\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/mod.py": "",
    })
    assert _names(root, files_of(root / "train.py")) == [
        "train.py", "pkg/__init__.py", "pkg/sub/__init__.py", "pkg/sub/mod.py"]


def test_nothing_outside_the_root_or_installed(tmp_path):
    _tree(tmp_path, {"outside.py": "", "proj/train.py": "import outside\nimport os\nimport torch\n"})
    assert _names(tmp_path / "proj", files_of(tmp_path / "proj" / "train.py")) == ["train.py"]


def test_a_link_out_of_the_root_and_installed_code_are_not_followed(tmp_path):
    _tree(tmp_path, {"shared/common.py": "", "proj/train.py": "import common\nimport local\n", "proj/local.py": "",
                     "venv/lib/site-packages/tool/run.py": "import helper\n",
                     "venv/lib/site-packages/tool/helper.py": ""})
    (tmp_path / "proj" / "common.py").symlink_to(tmp_path / "shared" / "common.py")
    assert _names(tmp_path / "proj", files_of(tmp_path / "proj" / "train.py")) == ["train.py", "local.py"]
    installed = tmp_path / "venv" / "lib" / "site-packages" / "tool" / "run.py"
    assert files_of(installed) == [installed.resolve()]


def test_a_folder_without_init_is_a_namespace_package(tmp_path):
    # Python 3 imports `tools.helpers` from tools/helpers.py (PEP 420), at any depth, and a
    # regular package inside a namespace folder runs its own __init__.py.
    root = _tree(tmp_path / "proj", {
        "train.py": "from tools.helpers import f\nimport lib.data.loaders\nfrom lib.engine import loop\n",
        "tools/helpers.py": "", "lib/data/loaders.py": "", "lib/engine/__init__.py": "",
        "lib/engine/loop.py": "", "tools/unused.py": ""})
    assert _names(root, files_of(root / "train.py")) == [
        "train.py", "tools/helpers.py", "lib/data/loaders.py", "lib/engine/__init__.py", "lib/engine/loop.py"]


def test_cycles_and_the_bound(tmp_path):
    root = _tree(tmp_path / "proj", {"train.py": "import a\n", "a.py": "import b\n",
                                     "b.py": "import a\nimport train\n"})
    assert _names(root, files_of(root / "train.py")) == ["train.py", "a.py", "b.py"]
    files = {"train.py": "import m0\n", **{f"m{i}.py": f"import m{i + 1}\n" for i in range(30)}}
    chain = _tree(tmp_path / "chain", files)
    assert len(files_of(chain / "train.py", limit=10)) == 10


def test_a_module_that_does_not_parse_is_listed_but_not_followed(tmp_path):
    root = _tree(tmp_path / "proj", {"train.py": "import broken\n", "broken.py": "import later\ndef (:\n",
                                     "later.py": ""})
    assert _names(root, files_of(root / "train.py")) == ["train.py", "broken.py"]


def test_project_root_climbs_out_of_packages(tmp_path):
    root = _tree(tmp_path / "proj", {"pkg/__init__.py": "", "pkg/sub/__init__.py": "",
                                     "pkg/sub/run.py": "from pkg.sub import helpers\n", "pkg/sub/helpers.py": "",
                                     "train.py": ""})
    assert project_root(root / "pkg" / "sub" / "run.py") == root.resolve()
    assert project_root(root / "train.py") == root.resolve()
    assert _names(root, files_of(root / "pkg" / "sub" / "run.py")) == ["pkg/sub/run.py", "pkg/__init__.py",
                                                                       "pkg/sub/__init__.py", "pkg/sub/helpers.py"]


def test_project_root_stays_in_a_repository_with_an_init_nothing_imports(tmp_path):
    """A cloned repository with an `__init__.py` at its top, run as `python train.py` from
    its own folder: the repository is the project, not the folder it was cloned into."""
    clones = _tree(tmp_path / "clones", {"repo/__init__.py": "", "repo/train.py": "import utils\n",
                                         "repo/utils.py": "", "repo/models/__init__.py": "",
                                         "repo/models/net.py": "from models import layers\n",
                                         "repo/models/layers.py": "", "other/big.py": ""})
    assert project_root(clones / "repo" / "train.py") == (clones / "repo").resolve()
    assert project_root(clones / "repo" / "models" / "net.py") == (clones / "repo").resolve()
    named = _tree(tmp_path / "named", {"repo/__init__.py": "", "repo/train.py": "from repo import utils\n",
                                       "repo/utils.py": ""})
    assert project_root(named / "repo" / "train.py") == named.resolve()


def test_relative_imports_of_an_entry_inside_a_package(tmp_path):
    root = _tree(tmp_path / "proj", {"pkg/__init__.py": "", "pkg/run.py": "from .data import loaders\n",
                                     "pkg/data.py": ""})
    assert _names(root, files_of(root / "pkg" / "run.py")) == ["pkg/run.py", "pkg/__init__.py", "pkg/data.py"]




def test_project_root_of_a_scripts_folder_that_imports_the_package_beside_it(tmp_path):
    """`scripts/train.py` (run as `PYTHONPATH=. python scripts/train.py`) importing the
    repository's own package `from vocoder.data import X`: the project is the folder above,
    so the package's modules are followed. Not for a package the scripts folder has itself,
    nor for a module (not a package) above it, nor for a folder that is a package."""
    root = _tree(tmp_path / "repo", {"vocoder/__init__.py": "", "vocoder/data.py": "",
                                     "scripts/train.py": "import torch\nfrom vocoder.data import Clips\n",
                                     "tools/run.py": "import segkit.models as models\n",
                                     "segkit/__init__.py": "", "segkit/models.py": "",
                                     "own/train.py": "from vocoder import data\n", "own/vocoder/__init__.py": "",
                                     "loose/train.py": "import helpers\n", "helpers.py": "",
                                     "pkg/__init__.py": "", "pkg/train.py": "from vocoder import data\n"})
    assert project_root(root / "scripts" / "train.py") == root.resolve()
    assert project_root(root / "tools" / "run.py") == root.resolve()
    assert _names(root, files_of(root / "scripts" / "train.py")) == [
        "scripts/train.py", "vocoder/__init__.py", "vocoder/data.py"]
    assert project_root(root / "own" / "train.py") == (root / "own").resolve()
    assert project_root(root / "loose" / "train.py") == (root / "loose").resolve()
    assert project_root(root / "pkg" / "train.py") == (root / "pkg").resolve()


def test_a_script_run_by_its_shebang_line_imports_like_any_entry(tmp_path):
    """`./train` (no `.py`, `#!/usr/bin/env python`) importing `from utils import Logger`:
    utils.py is used by the project, so its writes are migrated as a helper module's."""
    from ddpify.project import imported_elsewhere, names_used_elsewhere
    root = _tree(tmp_path / "proj", {"train": "#!/usr/bin/python3\nfrom utils import Logger\n",
                                     "utils.py": "class Logger:\n    pass\n",
                                     "LICENSE": "MIT\n", "run": "#!/bin/sh\npython -c 'import stats'\n",
                                     "stats.py": "def mean():\n    pass\n"})
    assert imported_elsewhere(str(root / "utils.py"))
    assert names_used_elsewhere(root.resolve(), "utils") == frozenset({"Logger"})
    assert not imported_elsewhere(str(root / "stats.py"))


def test_a_package_sees_the_scripts_folder_beside_it_but_a_repository_not_its_neighbours(tmp_path):
    """`segkit/io.py` imported by `tools/train.py` (no __init__.py in tools/) belongs to the
    project above both, as the script does; a repository (no __init__.py) that another
    repository beside it imports from stays its own project."""
    (tmp_path / "segkit").mkdir()
    (tmp_path / "segkit" / "__init__.py").write_text("")
    (tmp_path / "segkit" / "io.py").write_text("def save(path):\n    open(path, 'w').close()\n")
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "train.py").write_text("from segkit.io import save\nsave('x')\n")
    assert project_root(tmp_path / "segkit" / "io.py") == tmp_path.resolve()
    projects = tmp_path / "projects"
    (projects / "foo").mkdir(parents=True)
    (projects / "foo" / "train.py").write_text("import torch\n")
    (projects / "foo" / "models.py").write_text("X = 1\n")
    (projects / "bar").mkdir()
    (projects / "bar" / "run.py").write_text("from foo.models import X\n")
    assert project_root(projects / "foo" / "train.py") == (projects / "foo").resolve()
