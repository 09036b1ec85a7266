"""Where a file the script opens lies, and whether it is the user's.

A write counts as the user's when it lands in the working copy or outside the run's own
directory; reads of code and of system files are noise. The checks read the scope each
event carries, so the rules for it are written once, here.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

WRITE_MODE_LETTERS = set("wax+")
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
SYSTEM_PREFIXES = ("/dev/", "/proc/", "/sys/")
CODE_SUFFIXES = (".py", ".pyc", ".so")


def inside(path: str, directory: str | None) -> bool:
    if not directory:
        return False
    return path.startswith(os.path.join(directory, ""))


def path_scope(path: str, run_dirs: Sequence[str | None] = ()) -> str:
    """Where a file lies: the working directory ("cwd"), the run's own HOME and TMPDIR
    ("run": its directory, and the short TMPDIR it may have outside it), a system
    directory, or anywhere else ("outside": shared with every run)."""
    absolute = os.path.abspath(path)
    if inside(absolute, os.getcwd()):
        return "cwd"
    if absolute.startswith(SYSTEM_PREFIXES):
        return "system"
    if any(inside(absolute, directory) for directory in run_dirs):
        return "run"
    return "outside"


def opens_for_writing(mode: Any, flags: Any) -> bool:
    if isinstance(mode, str):
        return bool(WRITE_MODE_LETTERS & set(mode))
    return isinstance(flags, int) and bool(flags & WRITE_FLAGS)


def target_path(target: Any) -> str | None:
    if isinstance(target, (str, os.PathLike)):
        return os.fspath(target)
    name = getattr(target, "name", None)
    return name if isinstance(name, str) else None


def own_file(code_filename: str, script_dir: str) -> bool:
    """Whether code comes from the user's files: `<frozen os>` and `<string>` name no file
    (and, taken as relative paths, would seem to lie in the working directory)."""
    return not code_filename.startswith("<") and inside(os.path.abspath(code_filename), script_dir)


def working_copy(script: str) -> str:
    """The folder whose files are the user's: the working directory verify runs the script
    from (a project's root), or the script's own folder when it lies elsewhere."""
    script = os.path.abspath(script)
    return os.getcwd() if inside(script, os.getcwd()) else os.path.dirname(script)
