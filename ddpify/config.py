"""`[tool.ddpify]` in pyproject.toml: project defaults that the command line overrides.

    [tool.ddpify]
    select = ["DDP"]                # codes or prefixes to report
    ignore = ["DDP206"]             # codes or prefixes to silence
    exclude = ["legacy/*"]          # globs left out of every run (added to --exclude)
    sync-batchnorm = true
    keep-global-batch = false
    shard-eval = true               # false: every rank evaluates the whole set

The file is found by walking up from the first path to the repository root. It is read with
`tomllib` (Python 3.11+) or `tomli` when installed; without either the table is ignored
with a note rather than failing the run.
"""
import os
import re
from dataclasses import dataclass, field
from typing import Optional

from ddpify.diagnostics import unknown_codes
from ddpify.walk import repository_root

_TABLE = re.compile(r"^\s*\[\s*tool\s*\.\s*ddpify\s*\]", re.MULTILINE)

_LISTS = ("select", "ignore", "exclude")
_FLAGS = ("sync-batchnorm", "keep-global-batch", "shard-eval")


class ConfigError(Exception):
    """A `[tool.ddpify]` table that cannot be used; the message names the file."""


@dataclass(frozen=True)
class Config:
    path: Optional[str] = None
    select: Optional[tuple[str, ...]] = None
    ignore: Optional[tuple[str, ...]] = None
    exclude: tuple[str, ...] = ()
    sync_batchnorm: Optional[bool] = None
    keep_global_batch: Optional[bool] = None
    shard_eval: Optional[bool] = None
    # Said once on stderr, e.g. that the table was ignored for want of a TOML reader.
    notes: tuple[str, ...] = field(default=())


def find(start: str) -> Optional[str]:
    """The nearest pyproject.toml with a [tool.ddpify] table, not above the repository root."""
    directory = os.path.abspath(start if os.path.isdir(start) else os.path.dirname(start) or ".")
    stop = repository_root(directory)
    while True:
        candidate = os.path.join(directory, "pyproject.toml")
        if os.path.isfile(candidate) and _has_table(candidate):
            return candidate
        parent = os.path.dirname(directory)
        if directory == stop or parent == directory:
            return None
        directory = parent


def load(start: str) -> Config:
    path = find(start)
    if path is None:
        return Config()
    toml = _toml_reader()
    if toml is None:
        return Config(path, notes=(f"{path}: [tool.ddpify] ignored: reading it needs Python 3.11+ "
                                   "or `pip install tomli`",))
    try:
        with open(path, "rb") as handle:
            table = toml.load(handle).get("tool", {}).get("ddpify", {})
    except (OSError, ValueError) as error:  # TOMLDecodeError is a ValueError
        raise ConfigError(f"{path}: {error}") from None
    return _parse(path, table)


def _parse(path: str, table: dict) -> Config:
    unknown = sorted(set(table) - set(_LISTS) - set(_FLAGS))
    if unknown:
        raise ConfigError(f"{path}: [tool.ddpify]: unknown key {unknown[0]!r}; "
                          f"known: {', '.join(_LISTS + _FLAGS)}")
    lists: dict[str, tuple[str, ...]] = {}
    for key in _LISTS:
        if key in table:
            lists[key] = _codes_or_globs(path, key, table[key], upper=key != "exclude")
            unknown_rules = unknown_codes(lists[key]) if key != "exclude" else ()
            if unknown_rules:
                raise ConfigError(f"{path}: [tool.ddpify]: {key}: unknown rule code or prefix "
                                  f"{', '.join(unknown_rules)}; see ddpify --list-rules")
    flags: dict[str, bool] = {}
    for key in _FLAGS:
        if key in table:
            if not isinstance(table[key], bool):
                raise ConfigError(f"{path}: [tool.ddpify]: {key} must be true or false")
            flags[key] = table[key]
    return Config(
        path, select=lists.get("select"), ignore=lists.get("ignore"),
        exclude=lists.get("exclude", ()), sync_batchnorm=flags.get("sync-batchnorm"),
        keep_global_batch=flags.get("keep-global-batch"), shard_eval=flags.get("shard-eval"),
    )


def _codes_or_globs(path: str, key: str, value, upper: bool) -> tuple[str, ...]:
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{path}: [tool.ddpify]: {key} must be a list of strings")
    items = (item.strip() for item in value)
    return tuple(item.upper() if upper else item for item in items if item)


def _has_table(path: str) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return bool(_TABLE.search(handle.read()))
    except OSError:
        return False


def _toml_reader():
    try:
        import tomllib
        return tomllib
    except ImportError:
        pass
    try:
        import tomli
        return tomli
    except ImportError:
        return None
