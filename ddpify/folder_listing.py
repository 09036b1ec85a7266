"""A folder's entries, listed once while the folder is unchanged.

Working out a project's root asks the same folders, again and again, which scripts and
packages they hold: every module of the project asks of its own folder and of the one above
it (for a project kept in a temp or home folder, thousands of entries). A folder's mtime
moves whenever an entry is added, removed or renamed, so a listing is kept per (folder,
mtime). A stamp from the last moments is not trusted, as git treats a "racy" index entry:
a second change within the same clock tick would leave the mtime where it was."""
import os
import time
from functools import lru_cache
from typing import NamedTuple

# The clock tick of the file system's timestamps: a few milliseconds where stamps carry
# nanoseconds (ext4, xfs, btrfs, tmpfs, APFS), a whole second or two where they do not (FAT, HFS+).
_RACY_NS = 100_000_000
_RACY_NS_WHOLE_SECONDS = 2_000_000_000


class Entry(NamedTuple):
    name: str
    is_dir: bool
    is_file: bool
    is_link: bool


class Listing(NamedTuple):
    """A folder's entries sorted by name (the order of `sorted(Path(folder).iterdir())`), each
    with whether it is a folder or a file (symbolic links followed), and the names asked for
    most, sorted too."""
    entries: tuple[Entry, ...]
    named_py: tuple[str, ...]  # every name ending in .py, what `Path(folder).glob("*.py")` finds
    python_files: tuple[str, ...]  # the .py names that are files
    folders: tuple[str, ...]


_UNREADABLE = Listing((), (), (), ())


def listing(folder: str) -> Listing:
    """The folder's listing; an empty one when it cannot be read."""
    try:
        mtime = os.stat(folder).st_mtime_ns
    except OSError:
        return _UNREADABLE
    racy = _RACY_NS_WHOLE_SECONDS if mtime % 1_000_000_000 == 0 else _RACY_NS
    if time.time_ns() - mtime < racy:
        return _read(folder)
    return _kept(folder, mtime)


@lru_cache(maxsize=256)
def _kept(folder: str, _mtime_ns: int) -> Listing:
    return _read(folder)


def _read(folder: str) -> Listing:
    try:
        with os.scandir(folder) as scanned:
            entries = tuple(sorted(Entry(entry.name, entry.is_dir(), entry.is_file(), entry.is_symlink())
                                   for entry in scanned))
    except OSError:
        return _UNREADABLE
    named_py = tuple(entry.name for entry in entries if entry.name.endswith(".py"))
    return Listing(entries, named_py,
                   tuple(entry.name for entry in entries if entry.is_file and entry.name.endswith(".py")),
                   tuple(entry.name for entry in entries if entry.is_dir))


def python_files(folder: str) -> list[str]:
    """The paths of the folder's `.py` files, sorted."""
    return [os.path.join(folder, name) for name in listing(folder).python_files]


def clear() -> None:
    """Forget every listing: a benchmark round then costs what a fresh `ddpify` run does."""
    _kept.cache_clear()
