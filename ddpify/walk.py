"""Which files a run touches: paths as given, directories walked, excluded entries left out.

Walking skips what is never a training script of the project (version control, caches,
virtual environments, build output), what the root `.gitignore` ignores (its simple
patterns: `name`, `*.glob`, `dir/`, `/anchored`, `a/**/b`; negations are not supported and
are ignored), and what `--exclude GLOB` names. A glob matches a path when it matches the
path's name or any trailing part of it (`legacy/*` matches `src/legacy/old.py`).
"""
import fnmatch
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Optional

SKIPPED_DIRECTORIES = frozenset({
    ".git", ".hg", ".svn", "__pycache__", ".venv", "venv", ".env", "env", ".tox", ".nox",
    ".eggs", "build", "dist", "node_modules", ".mypy_cache", ".pytest_cache", ".ruff_cache",
    "site-packages",
})


@dataclass(frozen=True)
class Entry:
    path: str
    # Named on the command line rather than found by walking a directory.
    explicit: bool


def expand(paths: Sequence[str], excludes: Sequence[str] = ()) -> list[Entry]:
    """Files in command-line order; each directory's files in sorted order."""
    entries, seen = [], set()
    for path in paths:
        found: Iterable[Entry]
        if path != "-" and os.path.isdir(path):
            found = (Entry(file, False) for file in _walk(path, excludes))
        elif path != "-" and matches_any(path, excludes):
            continue
        else:
            found = [Entry(path, True)]
        for entry in found:
            key = entry.path if entry.path == "-" else os.path.normpath(entry.path)
            if key not in seen:
                seen.add(key)
                entries.append(entry)
    return entries


def notebooks_under(top: str, excludes: Sequence[str] = ()) -> int:
    """How many notebooks a walk of `top` passes over: a folder of notebooks alone must
    not pass a check silently, having been read not at all."""
    return sum(1 for _ in _walk(top, excludes, suffix=".ipynb"))


def _walk(top: str, excludes: Sequence[str], suffix: str = ".py") -> Iterator[str]:
    root = repository_root(top)
    ignored = GitIgnore.read(root) if root else GitIgnore(())
    for directory, subdirectories, files in os.walk(top):
        subdirectories[:] = sorted(
            name for name in subdirectories
            if not is_skipped_directory(directory, name)
            and not ignored.matches(os.path.join(directory, name), root, is_directory=True)
            and not matches_any(os.path.join(directory, name), excludes)
        )
        for name in sorted(files):
            path = os.path.join(directory, name)
            if (name.endswith(suffix) and not ignored.matches(path, root, is_directory=False)
                    and not matches_any(path, excludes)):
                yield path


def is_skipped_directory(parent: str, name: str) -> bool:
    if name in SKIPPED_DIRECTORIES or name.endswith(".egg-info"):
        return True
    # Any virtual environment, whatever its name.
    return os.path.exists(os.path.join(parent, name, "pyvenv.cfg"))


def repository_root(start: str) -> Optional[str]:
    """The nearest directory at or above `start` that holds `.git`."""
    directory = os.path.abspath(start)
    while True:
        if os.path.exists(os.path.join(directory, ".git")):
            return directory
        parent = os.path.dirname(directory)
        if parent == directory:
            return None
        directory = parent


def _trailing_parts(path: str) -> Iterator[str]:
    parts = PurePosixPath(path.replace(os.sep, "/")).parts
    for start in range(len(parts) - 1, -1, -1):
        yield "/".join(parts[start:])


def matches_any(path: str, globs: Iterable[str]) -> bool:
    globs = tuple(glob.rstrip("/") for glob in globs)
    if not globs:
        return False
    return any(fnmatch.fnmatchcase(part, glob) for part in _trailing_parts(os.path.normpath(path))
               for glob in globs)


class GitIgnore:
    """The simple patterns of one `.gitignore`, matched relative to its directory."""

    def __init__(self, patterns: Iterable[tuple[str, bool, bool]]) -> None:
        # (glob, anchored to the root, directories only)
        self.patterns = tuple(patterns)

    @classmethod
    def read(cls, root: str) -> "GitIgnore":
        try:
            with open(os.path.join(root, ".gitignore"), encoding="utf-8", errors="replace") as handle:
                lines = handle.read().splitlines()
        except OSError:
            return cls(())
        return cls(pattern for pattern in map(_parse_pattern, lines) if pattern)

    def matches(self, path: str, root: Optional[str], is_directory: bool) -> bool:
        if not self.patterns or root is None:
            return False
        relative = os.path.relpath(os.path.abspath(path), root).replace(os.sep, "/")
        if relative.startswith("../"):
            return False
        for glob, anchored, directories_only in self.patterns:
            if directories_only and not is_directory:
                continue
            candidates = [relative] if anchored else _trailing_parts(relative)
            if any(fnmatch.fnmatchcase(candidate, glob) for candidate in candidates):
                return True
        return False


def _parse_pattern(line: str) -> Optional[tuple[str, bool, bool]]:
    line = line.strip()
    if not line or line.startswith(("#", "!")):
        return None
    directories_only = line.endswith("/")
    line = line.rstrip("/")
    anchored = "/" in line
    line = line.lstrip("/")
    if line.startswith("**/"):
        line, anchored = line[3:], False
    return (line, anchored, directories_only) if line else None
