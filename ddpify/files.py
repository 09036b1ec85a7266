"""Reading sources the way Python does and writing results without ever half-writing.

Text is decoded with the file's own encoding (BOM or coding declaration, as the
interpreter would), kept with its line endings, and written back in the same encoding.
"""
import contextlib
import io
import os
import re
import socket
import stat
import tempfile
import tokenize
import zlib
from dataclasses import dataclass
from typing import Optional


class SourceError(Exception):
    """A file that cannot be read as Python source; the message names the file."""


@dataclass(frozen=True)
class Source:
    text: str
    encoding: str


def decode(data: bytes, path: str) -> Source:
    if b"\0" in data:
        raise SourceError(f"{path}: binary file, not Python source")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as error:
        raise SourceError(f"{path}: {error}") from None
    try:
        # newline handling is left to libcst: \r\n stays \r\n.
        return Source(data.decode(encoding), encoding)
    except (UnicodeDecodeError, LookupError):
        hint = "" if encoding.startswith("utf-8") else f" as declared ({encoding})"
        raise SourceError(
            f"{path}: cannot decode{hint or ' as UTF-8'}; add a coding declaration "
            "(# -*- coding: ... -*-) or save it as UTF-8"
        ) from None


def read_source(path: str) -> Source:
    return decode(read_bytes(path), path)


def read_bytes(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        raise SourceError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise SourceError(f"{path}: is a directory") from None
    except OSError as error:
        raise SourceError(f"{path}: {error.strerror}") from None


def encode(text: str, encoding: str) -> bytes:
    return text.encode(encoding)


def require_regular_file(path: str) -> None:
    """-i/--in-place rewrites files, never devices or pipes (a symlink to a file is a file)."""
    try:
        status = os.stat(path)
    except OSError:
        return  # reading it says what is wrong
    if not stat.S_ISREG(status.st_mode):
        raise SourceError(f"{path}: {_kind(status)}, not a regular file: not rewritten in place")


def check_writable(path: str) -> None:
    """Raise SourceError, naming `path`, if write_atomically would refuse it."""
    _target(path)


def read_only_note(path: str) -> Optional[str]:
    """A line for the user when `path` is a read-only file that write_atomically may write."""
    try:
        status = os.stat(os.path.realpath(path))
    except OSError:
        return None
    if stat.S_ISREG(status.st_mode) and not status.st_mode & 0o222:
        return f"{path}: read-only: written as asked, and left read-only"
    return None


def write_atomically(path: str, data: bytes) -> None:
    """Replace what `path` names with `data` in one step, or leave it as it was.

    A symlink is followed: the file it points to is written, the link stays. A character
    device or a FIFO (/dev/null, /dev/stdout, a named pipe) is streamed to, as a shell
    redirection would. A regular file is replaced through a temporary file beside it and
    one rename, keeping its mode and owner; one that the rename would damage (more than one
    hard link, someone else's) or that this process may not write is refused. A read-only
    file that this process may write (root, in a copy of a read-only checkout) is written
    and stays read-only; `read_only_note` says so. Errors name `path`, never the temporary
    file.
    """
    target, status = _target(path)
    if _names_a_descriptor(path) or status is not None and not stat.S_ISREG(status.st_mode):
        _stream(path, target, data)
        return
    directory = os.path.dirname(target)
    remove_leftovers(directory)
    try:
        descriptor, temporary = tempfile.mkstemp(dir=directory, prefix=_temporary_prefix(),
                                                 suffix=TEMPORARY_SUFFIX)
    except OSError as error:
        raise SourceError(f"{path}: cannot write into {directory}: {error.strerror}") from None
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
        if status is None:
            os.chmod(temporary, 0o666 & ~_umask())
        else:
            os.chmod(temporary, stat.S_IMODE(status.st_mode))
            if (status.st_uid, status.st_gid) != _owner(temporary):
                os.chown(temporary, status.st_uid, status.st_gid)
        os.replace(temporary, target)
    except BaseException as error:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(error, OSError):
            raise SourceError(f"{path}: cannot write: {error.strerror or error}") from None
        raise


def _target(path: str) -> tuple[str, Optional[os.stat_result]]:
    """The file a write to `path` lands in (through symlinks) and its status, if it exists;
    SourceError when writing there would surprise the user."""
    if _names_a_descriptor(path):
        return path, None
    target = os.path.realpath(path)
    try:
        status: Optional[os.stat_result] = os.stat(target)
    except FileNotFoundError:
        status = None
    except OSError as error:
        raise SourceError(f"{path}: {error.strerror}") from None
    if status is None:
        directory = os.path.dirname(target)
        if not os.path.isdir(directory):
            raise SourceError(f"{path}: directory {directory} does not exist")
        return target, None
    if stat.S_ISCHR(status.st_mode) or stat.S_ISFIFO(status.st_mode):
        return target, status
    if not stat.S_ISREG(status.st_mode):
        raise SourceError(f"{path}: {_kind(status)}: not written")
    if status.st_nlink > 1:
        raise SourceError(f"{path}: has {status.st_nlink} hard links, which replacing it would "
                          "break: not written (break the links first, or write elsewhere with -o)")
    if not os.access(target, os.W_OK):
        raise SourceError(f"{path}: read-only: not written (make it writable first)")
    if status.st_uid != os.geteuid() and os.geteuid() != 0:
        raise SourceError(f"{path}: owned by another user (uid {status.st_uid}), and replacing it "
                          "would make it yours: not written")
    return target, status


_DESCRIPTOR = re.compile(r"/dev/(stdout|stderr|fd/[0-9]+)|/proc/(self|[0-9]+)/fd/[0-9]+")


def _names_a_descriptor(path: str) -> bool:
    """/dev/stdout and its kin name an open descriptor (a pipe, a terminal, a redirected
    file) that the caller set up: written to as a stream, never replaced."""
    return bool(_DESCRIPTOR.fullmatch(os.path.abspath(path)))


def _stream(path: str, target: str, data: bytes) -> None:
    try:
        with open(target, "ab") as handle:  # never truncate what the caller opened
            handle.write(data)
    except OSError as error:
        raise SourceError(f"{path}: cannot write: {error.strerror or error}") from None


def _kind(status: os.stat_result) -> str:
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISFIFO, "a FIFO"))
    return next((name for test, name in kinds if test(status.st_mode)), "not a regular file")


def _owner(path: str) -> tuple[int, int]:
    status = os.stat(path)
    return status.st_uid, status.st_gid


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


# Temporary files: `.ddpify-<host>-<pid>-<random>.tmp`. A run killed with SIGKILL cannot
# remove its own; the next run that writes into the same directory removes those of this
# host whose process is gone. No user names a file like that.
TEMPORARY_SUFFIX = ".tmp"
_LEFTOVER = re.compile(r"\.ddpify-([0-9a-f]{8})-([0-9]+)-[a-z0-9_]+\.tmp\Z")
_cleaned_directories: set[str] = set()


def _host() -> str:
    return f"{zlib.crc32(socket.gethostname().encode()):08x}"


def _temporary_prefix() -> str:
    return f".ddpify-{_host()}-{os.getpid()}-"


def remove_leftovers(directory: str) -> None:
    """Remove what killed runs of ddpify left in `directory`: once per directory per run."""
    if directory in _cleaned_directories:
        return
    _cleaned_directories.add(directory)
    try:
        names = os.listdir(directory)
    except OSError:
        return
    host = _host()
    for name in names:
        match = _LEFTOVER.match(name)
        if match and match.group(1) == host and not _running(int(match.group(2))):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(directory, name))


def _running(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):  # someone else's process, or no pid at all
        return True
    return True


TWIN_SUFFIX = "_ddp.py"


def twin_of(path: str) -> str:
    """`train.py` -> `train_ddp.py`: the generated script kept beside its source."""
    return path[: -len(".py")] + TWIN_SUFFIX


def source_of_twin(path: str) -> str:
    """`train_ddp.py` -> `train.py`; a path that is no twin comes back as is."""
    return path[: -len(TWIN_SUFFIX)] + ".py" if path.endswith(TWIN_SUFFIX) else path
