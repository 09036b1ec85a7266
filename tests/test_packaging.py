"""What `pip install ddpify` ships: every module of the source tree is in a package that
setuptools finds (`packages = find:` in setup.cfg). A folder without `__init__.py` imports
from a checkout, as a namespace package, and is missing from a built wheel."""
from pathlib import Path

from setuptools import find_packages

ROOT = Path(__file__).resolve().parent.parent


def test_every_module_folder_is_a_package_setuptools_finds():
    shipped = set(find_packages(str(ROOT), include=["ddpify", "ddpify.*"]))
    folders = {".".join(path.parent.relative_to(ROOT).parts)
               for path in (ROOT / "ddpify").rglob("*.py") if "__pycache__" not in path.parts}
    assert sorted(folders - shipped) == []
