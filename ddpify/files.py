"""Reading sources the way Python does and writing results without ever half-writing.

Text is decoded with the file's own encoding (BOM or coding declaration, as the
interpreter would), kept with its line endings, and written back in the same encoding.
"""
import io
import os
import tempfile
import tokenize
from dataclasses import dataclass


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


def check_writable(path: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise SourceError(f"{path}: directory {directory} does not exist")


def write_atomically(path: str, data: bytes) -> None:
    """Write to a temporary file beside the target, then rename over it in one step."""
    check_writable(path)
    directory = os.path.dirname(os.path.abspath(path))
    mode = os.stat(path).st_mode & 0o7777 if os.path.exists(path) else None
    descriptor, temporary = tempfile.mkstemp(dir=directory, prefix=".ddpify-", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
        if mode is not None:
            os.chmod(temporary, mode)
        else:
            os.chmod(temporary, 0o666 & ~_umask())
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


TWIN_SUFFIX = "_ddp.py"


def twin_of(path: str) -> str:
    """`train.py` -> `train_ddp.py`: the generated script kept beside its source."""
    return path[: -len(".py")] + TWIN_SUFFIX


def source_of_twin(path: str) -> str:
    """`train_ddp.py` -> `train.py`; a path that is no twin comes back as is."""
    return path[: -len(TWIN_SUFFIX)] + ".py" if path.endswith(TWIN_SUFFIX) else path
