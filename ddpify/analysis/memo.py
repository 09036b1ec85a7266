"""Results computed from a libcst subtree, kept for the rest of one migration.

libcst nodes never change, so what a function computes from a node holds as long as the
node lives: a function body the rules walk again for each batch loop, each caller and each
round can be read once. The memos are keyed by the nodes themselves (libcst hashes a node
by its identity) and emptied when a migration ends (api.migrate_source), so a walk over
many files keeps no earlier file's tree alive."""
import functools
from typing import Any, Callable, NamedTuple, TypeVar

_Function = TypeVar("_Function", bound=Callable[..., Any])
_MEMOS: list[Any] = []


def per_migration(function: _Function) -> _Function:
    """`function`, its results kept until `clear()`; its arguments must be hashable."""
    memo = functools.lru_cache(maxsize=None)(function)
    _MEMOS.append(memo)
    return memo  # type: ignore[return-value]


class Store(dict):  # type: ignore[type-arg]
    """A dict of results keyed by nodes, emptied with the memos at `clear()`; it answers
    `cache_info()` and `cache_clear()` as they do."""

    def cache_clear(self) -> None:
        self.clear()

    def cache_info(self) -> "StoreInfo":
        return StoreInfo(len(self))


class StoreInfo(NamedTuple):
    """What `Store.cache_info()` answers: the field of functools' CacheInfo it has."""

    currsize: int


def per_migration_store() -> Store:
    """A new Store, kept until the migration ends."""
    store = Store()
    _MEMOS.append(store)
    return store


def clear() -> None:
    for memo in _MEMOS:
        memo.cache_clear()
