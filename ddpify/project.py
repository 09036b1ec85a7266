"""The script's own modules: what the functions it imports from them do (ddpify/analysis/effects.py).

`python train.py` puts the script's folder first on sys.path, so `import utils` there means
utils.py or utils/__init__.py beside the script; only such files are read, never anything
installed. What ddpify learns is handed to the migration as a `Project`: a call of a helper
that only prints is guarded like a print, one that writes files like a `torch.save`.
"""
import ast
import os
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Optional, cast

from ddpify.analysis.effects import MIXED, OPAQUE, FunctionEffects, absolute_module

# Folders of installed packages: a script there is not part of a project being migrated.
INSTALLED = frozenset({"site-packages", "dist-packages"})
# How far `from .misc import bar` re-exports are followed, and how many modules one script
# may pull in: a project is a handful of files, not a site-packages.
MAX_REEXPORTS = 4
MAX_MODULES = 64
# Files read to learn who imports what.
MAX_SCANNED = 400
SKIPPED_DIRECTORIES = frozenset({
    "__pycache__", "venv", "env", "build", "dist", "node_modules", "site-packages",
})


class Project:
    """The effect of calling a function of the project's own modules (effects.PURE, SPEAKS,
    WRITES or MIXED; None for anything else), by the name the script's calls resolve to:
    "utils.progress_bar", or the bare name after `from utils import *`. Modules are read
    when a call asks for them."""

    def __init__(self, modules: Optional["_Modules"] = None, imported: Iterable[str] = (),
                 star_names: Optional[Mapping[str, str]] = None, used_elsewhere: Iterable[str] = ()) -> None:
        self._modules = modules
        self._imported = frozenset(imported)
        self._star_names = dict(star_names or {})
        # The top-level functions and classes of this module that other modules of the
        # project import: what runs of it when the program runs, though nothing here calls it.
        self.used_elsewhere = frozenset(used_elsewhere)
        # Some of them print or write beside work every rank must do (effects.MIXED): their
        # output is guarded here, in the helper, since the call must stay on every rank.
        self.speaks_for_callers = False
        # Per name the script calls: (effect or None, whether it trains). Every call of the
        # script asks, so each name is resolved once.
        self._known: dict[str, tuple[Optional[str], bool]] = {}

    def effect(self, qualified: str) -> Optional[str]:
        return self._facts_of(qualified)[0]

    def trains(self, qualified: str) -> bool:
        """Calling `qualified` takes training steps (`engine.train_one_epoch(...)`)."""
        return self._facts_of(qualified)[1]

    def attribute_readers(self, qualified: str, wrapper_attributes: frozenset[str]) -> set[int]:
        """Which positional arguments of `qualified` it reads attributes of (effects.py)."""
        found = self._local(qualified) if self._modules is not None else None
        definition = self._modules.definition(found) if found is not None and self._modules is not None else None
        return set() if definition is None else definition[0].attribute_readers(definition[1], wrapper_attributes)

    def makes_loader(self, qualified: str) -> bool:
        """Calling `qualified` returns a DataLoader it builds (`utils.get_loaders(cfg)`)."""
        found = self._local(qualified) if self._modules is not None else None
        definition = self._modules.definition(found) if found is not None and self._modules is not None else None
        return definition is not None and definition[0].returns_loader(definition[1])

    def defines(self, qualified: str) -> bool:
        """`qualified` is a function or class of one of the project's own modules."""
        found = self._local(qualified) if self._modules is not None else None
        return found is not None and self._modules is not None and self._modules.definition(found) is not None

    def _facts_of(self, qualified: str) -> tuple[Optional[str], bool]:
        if self._modules is None:
            return None, False
        if qualified not in self._known:
            found = self._local(qualified)
            definition = self._modules.definition(found) if found is not None else None
            if definition is None:
                self._known[qualified] = (None, False)
            else:
                effects, name = definition
                effect = effects.of(name)
                self._known[qualified] = (None if effect == OPAQUE else effect, effects.trains(name))
        return self._known[qualified]

    def _local(self, qualified: str) -> Optional[str]:
        """The full name, when it names something in one of the project's imported modules."""
        head, dot, rest = qualified.partition(".")
        qualified = self._star_names.get(head, head) + dot + rest
        module = qualified.rpartition(".")[0]
        if not any(module == name or module.startswith(name + ".") for name in self._imported):
            return None
        return qualified


def read(script: str, source: str) -> Project:
    """The project around `script`, whose text is `source`. A script that does not parse is
    not ddpify's to judge here: the migration itself reports it."""
    path = Path(script).resolve()
    if INSTALLED.intersection(path.parent.parts):
        return Project()  # installed code: its imports are other packages, not its project
    root = project_root(path)
    if root == path.parent and not _modules_beside(str(root)) - {path.stem}:
        return Project()  # a script alone in its folder: nothing to read, not even the script
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return Project()
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    modules = _Modules(root)
    imported: set[str] = set()
    star_names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names if modules.effects(alias.name) is not None}
        elif isinstance(node, ast.ImportFrom):
            module = absolute_module(node, package)
            effects = modules.effects(module) if module is not None else None
            if module is None or effects is None:
                continue
            imported.add(module)
            if any(alias.name == "*" for alias in node.names):
                star_names.update((name, f"{module}.{name}") for name in effects.functions + effects.classes
                                  if not name.startswith("_") and "." not in name)
    used = names_used_elsewhere(root, name)
    if not imported and not used:
        return Project()
    found = Project(modules, imported, star_names, used)
    own = modules.effects(name) if used else None
    found.speaks_for_callers = own is not None and any(
        own.of(function) == MIXED for function in own.functions if function.split(".")[0] in used)
    return found


def project_root(path: Path) -> Path:
    """The folder the program's imports resolve from: the script's own folder, or above the
    packages it sits in (`trainer/trainer.py` belongs to the project beside `trainer/`)."""
    folder = path.parent
    while (folder / "__init__.py").is_file() and folder.parent != folder:
        folder = folder.parent
    return folder


def module_name(path: Path, root: Path) -> str:
    """`trainer/trainer.py` under root -> "trainer.trainer"; a package's `__init__.py` -> its name."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def names_used_elsewhere(root: Path, name: str) -> frozenset[str]:
    """The top-level names of module `name` that the project's other modules import."""
    return _import_index(str(root), _tree_stamp(root)).get(name, frozenset())


class _Modules:
    """The project's modules under one folder, read once each."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._read: dict[str, Optional[FunctionEffects]] = {}

    def effects(self, module: str) -> Optional[FunctionEffects]:
        """The module's functions, or None when it is not one of the project's files."""
        if module not in self._read:
            if len(self._read) >= MAX_MODULES:
                return None
            self._read[module] = None  # an import cycle reads it once
            found = _module_file(self.root, module)
            if found is not None:
                path, is_package = found
                tree = _parsed(str(path), *_stamp(path))
                if tree is not None:
                    package = module if is_package else module.rpartition(".")[0]
                    self._read[module] = FunctionEffects(tree, package, self.effect_of)
        return self._read[module]

    def effect_of(self, qualified: str) -> str:
        """The effect of calling `qualified` (module.function), followed through re-exports."""
        definition = self.definition(qualified)
        return OPAQUE if definition is None else definition[0].of(definition[1])

    def definition(self, qualified: str, depth: int = 0) -> Optional[tuple[FunctionEffects, str]]:
        """The module that defines `qualified` and the function's name in it ("Class.method"
        for a method), followed through re-exports; None when no project file defines it."""
        module, _, name = qualified.rpartition(".")
        effects = self.effects(module) if module else None
        if effects is None and module.count(".") >= 1:
            # "utils.ProgressMeter.display": a method of a class of module utils.
            module, _, owner = module.rpartition(".")
            effects, name = self.effects(module), f"{owner}.{name}"
        if effects is None or depth > MAX_REEXPORTS:
            return None
        if name in effects.functions:
            return effects, name
        head, dot, rest = name.partition(".")
        if head in effects.imports:  # re-exported: `from .meters import ProgressMeter`
            return self.definition(effects.imports[head] + dot + rest, depth + 1)
        return None


def _modules_beside(root: str) -> frozenset[str]:
    """The top-level module names a folder offers: its .py files and packages."""
    try:
        with os.scandir(root) as entries:
            return frozenset(
                entry.name[:-3] if entry.name.endswith(".py") else entry.name
                for entry in entries
                if entry.name.endswith(".py") and entry.is_file()
                or entry.is_dir() and os.path.isfile(os.path.join(entry.path, "__init__.py")))
    except OSError:
        return frozenset()


def _module_file(root: Path, module: str) -> Optional[tuple[Path, bool]]:
    base = root.joinpath(*module.split("."))
    if (base / "__init__.py").is_file():
        return base / "__init__.py", True
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py"), False
    return None


def _stamp(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_mtime_ns, stat.st_size


@lru_cache(maxsize=256)
def _parsed(path: str, _mtime: int, _size: int) -> Optional[ast.Module]:
    """A walk over many scripts of one project reads each helper module once."""
    try:
        with open(path, "rb") as handle:
            return ast.parse(handle.read(), filename=os.fspath(path))
    except (OSError, SyntaxError, ValueError):
        return None


def _project_files(root: Path) -> list[Path]:
    """The Python files of the project, bounded: a project is a few dozen modules."""
    found: list[Path] = []
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(name for name in subfolders
                               if name not in SKIPPED_DIRECTORIES and not name.startswith("."))
        found.extend(Path(folder, file) for file in sorted(files) if file.endswith(".py"))
        if len(found) > MAX_SCANNED:
            return found[:MAX_SCANNED]
    return found


def _tree_stamp(root: Path) -> tuple[tuple[str, int, int], ...]:
    stamps = []
    for path in _project_files(root):
        try:
            stamps.append((str(path), *_stamp(path)))
        except OSError:
            continue
    return tuple(stamps)


@lru_cache(maxsize=16)
def _import_index(root: str, stamp: tuple[tuple[str, int, int], ...]) -> dict[str, frozenset[str]]:
    """For each module of the project, the names other modules import from it: by
    `from m import f`, `from m import *` (its public names), or `import m` / `from pkg import m`
    followed by `m.f`. Computed once per project state, for all of its modules."""
    base = Path(root)
    used: dict[str, set[str]] = {}
    for file, mtime, size in stamp:
        path = Path(file)
        tree = _parsed(file, mtime, size)
        if tree is None:
            continue
        own = module_name(path, base)
        package = own if path.name == "__init__.py" else own.rpartition(".")[0]
        for importer, names in _imports_of(tree, package, base):
            if importer != own:
                used.setdefault(importer, set()).update(names)
    return {module: frozenset(names) for module, names in used.items()}


def _imports_of(tree: ast.Module, package: str, root: Path) -> list[tuple[str, set[str]]]:
    """(module, names) for each project module this tree imports names from."""
    found: list[tuple[str, set[str]]] = []
    bound: dict[str, str] = {}  # local name -> the project module it stands for
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            found.extend(_names_from(node, package, root, bound))
        elif isinstance(node, ast.Import):
            bound.update((alias.asname or alias.name, alias.name) for alias in node.names
                         if _module_file(root, alias.name) is not None)
    if bound:
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _dotted(node.value) in bound:
                found.append((bound[cast(str, _dotted(node.value))], {node.attr}))
    return found


def _names_from(node: ast.ImportFrom, package: str, root: Path,
                bound: dict[str, str]) -> list[tuple[str, set[str]]]:
    """`from m import f` names f of m; `from pkg import m` binds module m (its attributes
    are read later); `from m import *` names m's public definitions."""
    module = absolute_module(node, package)
    if module is None:
        return []
    found: list[tuple[str, set[str]]] = []
    for alias in node.names:
        if alias.name == "*":
            found.append((module, _public_names(root, module)))
        elif _module_file(root, f"{module}.{alias.name}") is not None:
            bound[alias.asname or alias.name] = f"{module}.{alias.name}"
        else:
            found.append((module, {alias.name}))
    return found


def _public_names(root: Path, module: str) -> set[str]:
    located = _module_file(root, module)
    tree = _parsed(str(located[0]), *_stamp(located[0])) if located is not None else None
    if tree is None:
        return set()
    return {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))
            and not node.name.startswith("_")}


def _dotted(node: ast.expr) -> Optional[str]:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        owner = _dotted(node.value)
        return None if owner is None else f"{owner}.{node.attr}"
    return None
