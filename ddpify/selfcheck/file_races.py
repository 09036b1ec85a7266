"""A file rank 0 writes, read or deleted by every rank with no barrier between (DDP941).

Rule (conservative, stdlib `ast` only): every read by a rank of a file another rank writes
comes after the write by a barrier every rank reaches, and a delete comes after every read.
Checked where a race passes on one machine's CPU by luck of timing:
- a write under a rank-0 guard (`torch.save(x, path)`, `np.save(path, a)`, `open(path, "w")`)
  and a read on every rank of the same path expression (`torch.load(path)`, `np.load(path)`,
  `open(path)`), both in one loop of one function (or of the module). Read later in the pass,
  a barrier must sit in that loop between the write and the read; read earlier in the pass
  (the next pass reads what this one wrote: the best weights reloaded at an epoch's start),
  a barrier must sit in that loop before the read or after the write;
- a delete under a rank-0 guard (`shutil.rmtree(scratch)`, `os.remove(path)`) of a path that
  an earlier read on every rank in the same function names (`torch.load(os.path.join(scratch,
  "best.pt"))`), with no barrier between the read and the delete.
A call of a function of this file counts as the reads and writes in it, with its parameters
(and their defaults) standing for the call's arguments; a barrier in the function before its
read counts as one before the call. Only a barrier no rank-0 guard encloses counts.
"""
import ast
from collections.abc import Iterator, Sequence
from typing import NamedTuple, Optional

from ddpify import ast_walk
from ddpify.selfcheck.source import FUNCTIONS, LOOPS, Scope, Source, dotted, last_part

Finding = tuple[str, int, str]

# What writes, reads and deletes a file, and which argument names it.
_WRITERS = {"torch.save": 1, "np.save": 0, "numpy.save": 0, "np.savez": 0, "numpy.savez": 0, "np.savetxt": 0,
            "numpy.savetxt": 0}
_READERS = {"torch.load": 0, "np.load": 0, "numpy.load": 0, "np.loadtxt": 0, "numpy.loadtxt": 0,
            "pd.read_csv": 0, "pandas.read_csv": 0}
_DELETES = frozenset({"os.remove", "os.unlink", "os.rmdir", "shutil.rmtree"})
_WRITING_LETTERS = frozenset("wax+")


class _Access(NamedTuple):
    kind: str  # "write", "read" or "delete"
    path: str  # the path's expression, as written
    parts: frozenset[str]  # the path and the expressions it is built from (a folder it is in)
    node: ast.Call  # the call in the scope checked: the access itself, or the call of its function
    waited: bool  # a barrier in the called function comes before the read


def file_races(migrated: Source) -> Iterator[Finding]:
    for scope in [migrated.tree, *(function for functions in migrated.functions.values()
                                   for function in functions)]:
        accesses = list(_accesses(migrated, scope))
        if not accesses:
            continue
        barriers = [call for call in migrated.calls_in(scope)
                    if last_part(call.func) == "barrier" and not migrated.guarded(call)]
        yield from _unordered_reads(migrated, accesses, barriers)
        yield from _unordered_deletes(accesses, barriers)


def _unordered_reads(source: Source, accesses: Sequence[_Access], barriers: Sequence[ast.Call]) -> Iterator[Finding]:
    for write in accesses:
        if write.kind != "write":
            continue
        for read in accesses:
            if read.kind != "read" or read.path != write.path or read.waited:
                continue
            loop = _common_loop(source, write.node, read.node)
            if loop is None:
                continue
            written, read_at = write.node.lineno, read.node.lineno
            inside = [barrier.lineno for barrier in barriers if loop in source.ancestors(barrier)]
            if written < read_at and not any(written < line < read_at for line in inside):
                yield ("DDP941", read_at, f"`{read.path}` is read on every rank after rank 0 writes it in the same "
                       f"pass (line {written}), with no barrier between them")
            elif read_at < written and not any(line < read_at or line > written for line in inside):
                yield ("DDP941", read_at, f"`{read.path}` is read on every rank at the start of a pass, and rank 0 "
                       f"writes it later in the pass (line {written}): no barrier in the loop orders the next "
                       "pass's read after the write")


def _unordered_deletes(accesses: Sequence[_Access], barriers: Sequence[ast.Call]) -> Iterator[Finding]:
    for delete in accesses:
        if delete.kind != "delete":
            continue
        for read in accesses:
            deleted, read_at = delete.node.lineno, read.node.lineno
            if read.kind == "read" and delete.path in read.parts and read_at < deleted and not any(
                    read_at < barrier.lineno < deleted for barrier in barriers):
                yield ("DDP941", deleted, f"rank 0 deletes `{delete.path}` while another rank may still read it "
                       f"(line {read_at}): no barrier between the read and the delete")


def _common_loop(source: Source, first: ast.AST, second: ast.AST) -> Optional[ast.AST]:
    around_second = set(source.ancestors(second))
    for ancestor in source.ancestors(first):
        if isinstance(ancestor, FUNCTIONS):
            return None
        if isinstance(ancestor, LOOPS) and ancestor in around_second:
            return ancestor
    return None


def _accesses(source: Source, scope: Scope) -> Iterator[_Access]:
    for call in source.calls_in(scope):
        found = _access(call)
        if found is not None:
            kind, path = found
            if (kind == "read") != source.guarded(call):
                yield _Access(kind, ast.unparse(path), _parts(path), call, False)
            continue
        yield from _accesses_in_function(source, call)


def _accesses_in_function(source: Source, call: ast.Call) -> Iterator[_Access]:
    """The accesses of a function of this file called by name, at its call: its parameters
    stand for the call's arguments (or their defaults)."""
    if not isinstance(call.func, ast.Name) or source.guarded(call):
        return
    for function in source.functions.get(call.func.id, []):
        if not isinstance(function, FUNCTIONS):
            continue
        handed = _handed(function, call)
        barriers = [inner.lineno for inner in source.calls_in(function)
                    if last_part(inner.func) == "barrier" and not source.guarded(inner)]
        for inner in source.calls_in(function):
            found = _access(inner)
            if found is None:
                continue
            kind, path = found
            if (kind == "read") == source.guarded(inner):
                continue
            if isinstance(path, ast.Name) and path.id in handed:
                path = handed[path.id]
            yield _Access(kind, ast.unparse(path), _parts(path), call,
                          any(line < inner.lineno for line in barriers))


def _handed(function: ast.AST, call: ast.Call) -> dict[str, ast.expr]:
    """Parameter name -> the expression the call hands it (or the parameter's default)."""
    assert isinstance(function, FUNCTIONS)
    arguments = function.args
    positional = [*arguments.posonlyargs, *arguments.args]
    handed: dict[str, ast.expr] = {}
    defaults = arguments.defaults
    for parameter, default in zip(positional[len(positional) - len(defaults):], defaults):
        handed[parameter.arg] = default
    for parameter, value in zip(positional, call.args):
        if isinstance(value, ast.Starred):
            break
        handed[parameter.arg] = value
    handed.update((keyword.arg, keyword.value) for keyword in call.keywords if keyword.arg is not None)
    return handed


def _access(call: ast.Call) -> Optional[tuple[str, ast.expr]]:
    """("write" | "read" | "delete", the path's expression) for a call that touches a file."""
    name = dotted(call.func)
    if name in _WRITERS or name in _READERS:
        position = _WRITERS[name] if name in _WRITERS else _READERS[name]
        path = call.args[position] if len(call.args) > position and not isinstance(
            call.args[position], ast.Starred) else None
        return None if path is None else ("write" if name in _WRITERS else "read", path)
    if name in _DELETES and call.args and not isinstance(call.args[0], ast.Starred):
        return "delete", call.args[0]
    if name == "open" and call.args and not isinstance(call.args[0], ast.Starred):
        mode = call.args[1] if len(call.args) > 1 else next(
            (keyword.value for keyword in call.keywords if keyword.arg == "mode"), None)
        if mode is None or isinstance(mode, ast.Constant) and isinstance(mode.value, str):
            letters = set(str(mode.value)) if mode is not None else {"r"}
            return ("write" if letters & _WRITING_LETTERS else "read"), call.args[0]
    return None


def _parts(path: ast.expr) -> frozenset[str]:
    return frozenset(ast.unparse(node) for node in ast_walk.walk(path)
                     if isinstance(node, (ast.Name, ast.Attribute, ast.Constant, ast.Call, ast.JoinedStr)))
