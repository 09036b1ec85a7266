"""Which files form a project: an entry script and the project's own modules it imports.

`python train.py` resolves `import utils` from the script's folder; a script inside a
package resolves its relative imports through the packages above it. The project root is
the nearest folder at or above the script's that is not a package, and only files under it
are ever part of the project: nothing installed, nothing outside. Imports are read with
`ast` (no libcst: a walk over a project must cost little next to migrating it), with the
same module-to-file rules as `ddpify.project`, which reads what the helpers do.

Imports that no reading can follow (`importlib.import_module(name)`, `__import__`,
`sys.path` edits) are reported by the migration itself, with their line (DDP909).
"""
import ast
import os
from collections import deque
from pathlib import Path
from typing import Optional

from ddpify import project
from ddpify.analysis.effects import absolute_module
from ddpify.project import INSTALLED, _module_file, _parsed, _stamp, import_statements

# A project is a few dozen modules; past this a walk is following something it should not.
MAX_MODULES = 200


def project_root(path: os.PathLike | str) -> Path:
    """The folder the entry script's imports resolve from (ddpify.project.project_root)."""
    return project.project_root(Path(path).resolve())


def files_of(script: os.PathLike | str, limit: int = MAX_MODULES) -> list[Path]:
    """The entry first, then every project module it imports, transitively, in the order
    they are found (absolute, resolved paths; each package's `__init__.py` included)."""
    entry = Path(script).resolve()
    root = project_root(entry)
    found: dict[Path, None] = {entry: None}
    if INSTALLED.intersection(root.parts):
        return list(found)  # installed code: its imports are other packages, not a project
    waiting = deque([entry])
    while waiting and len(found) < limit:
        path = waiting.popleft()
        tree = _tree(path)
        if tree is None:
            continue
        for module_file in _imported_files(tree, _package_of(path, root), root, entry.parent):
            if root not in module_file.parents:
                continue  # a link to a file elsewhere: not the project's to rewrite
            if module_file not in found and len(found) < limit:
                found[module_file] = None
                waiting.append(module_file)
    return list(found)


def _tree(path: Path) -> Optional[ast.Module]:
    try:
        return _parsed(str(path), *_stamp(path))
    except OSError:
        return None


def _package_of(path: Path, root: Path) -> str:
    """The package a module belongs to ("" for a module at the root): what its relative
    imports are relative to."""
    folder = path.parent
    if folder == root or root not in folder.parents:
        return ""
    return ".".join(folder.relative_to(root).parts)


def _imported_files(tree: ast.Module, package: str, root: Path, entry_folder: Path) -> list[Path]:
    files: list[Path] = []
    for node in import_statements(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                files += _files_of_module(alias.name, root, entry_folder)
        elif isinstance(node, ast.ImportFrom):
            module = absolute_module(node, package)
            if module is None:
                continue
            files += _files_of_module(module, root, entry_folder)
            for alias in node.names:
                if alias.name != "*":  # `from pkg import mod`: mod may be a module
                    files += _files_of_module(f"{module}.{alias.name}", root, entry_folder,
                                              packages=False)
    return files


def _files_of_module(module: str, root: Path, entry_folder: Path, packages: bool = True) -> list[Path]:
    """`a.b.c`'s file and the `__init__.py` of packages a and a.b, which importing it runs;
    from the entry's folder first (where `python train.py` looks), then the root. With
    `packages=False` only the module's own file, when it is one (`from a import b`)."""
    for base in dict.fromkeys((entry_folder, root)):
        target = _module_file(base, module)
        if target is None:
            continue
        if not packages:
            return [target[0].resolve()]
        parts = module.split(".")
        # A folder on the way without __init__.py is a namespace package (PEP 420): Python 3
        # imports `utils.config` from `utils/config.py` all the same, with no file of its own.
        inits = [_module_file(base, ".".join(parts[:depth])) for depth in range(1, len(parts))]
        return [init[0].resolve() for init in inits if init is not None] + [target[0].resolve()]
    return []
