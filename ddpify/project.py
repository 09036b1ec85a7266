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
from typing import Optional

from ddpify.analysis.effects import OPAQUE, FunctionEffects, absolute_module

# Folders of installed packages: a script there is not part of a project being migrated.
INSTALLED = frozenset({"site-packages", "dist-packages"})
# How far `from .misc import bar` re-exports are followed, and how many modules one script
# may pull in: a project is a handful of files, not a site-packages.
MAX_REEXPORTS = 4
MAX_MODULES = 64


class Project:
    """The effect of calling a function of the project's own modules (effects.PURE, SPEAKS,
    WRITES or MIXED; None for anything else), by the name the script's calls resolve to:
    "utils.progress_bar", or the bare name after `from utils import *`. Modules are read
    when a call asks for them."""

    def __init__(self, modules: Optional["_Modules"] = None, imported: Iterable[str] = (),
                 star_names: Optional[Mapping[str, str]] = None) -> None:
        self._modules = modules
        self._imported = frozenset(imported)
        self._star_names = dict(star_names or {})
        # Per name the script calls: (effect or None, whether it trains). Every call of the
        # script asks, so each name is resolved once.
        self._known: dict[str, tuple[Optional[str], bool]] = {}

    def effect(self, qualified: str) -> Optional[str]:
        return self._facts_of(qualified)[0]

    def trains(self, qualified: str) -> bool:
        """Calling `qualified` takes training steps (`engine.train_one_epoch(...)`)."""
        return self._facts_of(qualified)[1]

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
    root = path.parent
    if INSTALLED.intersection(root.parts):
        return Project()  # installed code: its imports are other packages, not its project
    if not _modules_beside(str(root)) - {path.stem}:
        return Project()  # a script alone in its folder: nothing to read, not even the script
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return Project()
    modules = _Modules(root)
    imported: set[str] = set()
    star_names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names if modules.effects(alias.name) is not None}
        elif isinstance(node, ast.ImportFrom):
            module = absolute_module(node, "")
            effects = modules.effects(module) if module is not None else None
            if module is None or effects is None:
                continue
            imported.add(module)
            if any(alias.name == "*" for alias in node.names):
                star_names.update((name, f"{module}.{name}") for name in effects.functions + effects.classes
                                  if not name.startswith("_") and "." not in name)
    return Project(modules, imported, star_names) if imported else Project()


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
