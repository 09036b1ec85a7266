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
A delete also meets a read by the shape of their paths, where the text differs: a loop over
a glob (`for stale in glob.glob("swa/epoch_*.pt"): os.remove(stale)` after `torch.load(
f"swa/epoch_{e}.pt")`), a name bound once in the scope (`best = os.path.join(run_dir,
"best.pt")`, then `shutil.rmtree(run_dir)`), pathlib's `stale.unlink()` and `folder.rmdir()`.
"""
import ast
import fnmatch
import re
from collections.abc import Iterator, Sequence
from typing import NamedTuple, Optional, cast

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
    shape: Optional[str] = None  # `swa/epoch_*.pt`, `<run_dir>/best.pt`: the path as it is built
    fields: tuple[str, ...] = ()  # the expressions formatted into it: `epoch`, `epoch - 2`


def file_races(migrated: Source) -> Iterator[Finding]:
    for scope in [migrated.tree, *(function for functions in migrated.functions.values()
                                   for function in functions)]:
        accesses = list(_accesses(migrated, scope))
        if not accesses:
            continue
        barriers = [call for call in migrated.calls_in(scope)
                    if last_part(call.func) == "barrier" and not migrated.guarded(call)]
        yield from _unordered_reads(migrated, accesses, barriers)
        yield from _unordered_deletes(migrated, accesses, barriers)


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


def _unordered_deletes(source: Source, accesses: Sequence[_Access],
                       barriers: Sequence[ast.Call]) -> Iterator[Finding]:
    for delete in accesses:
        if delete.kind != "delete":
            continue
        for read in accesses:
            deleted, read_at = delete.node.lineno, read.node.lineno
            if read.kind == "read" and (delete.path in read.parts or _shapes_meet(read.shape, delete.shape)
                                        and not _earlier_training_pass(source, read, delete)) \
                    and read_at < deleted and not any(
                    read_at < barrier.lineno < deleted for barrier in barriers):
                yield ("DDP941", deleted, f"rank 0 deletes `{delete.path}` while another rank may still read it "
                       f"(line {read_at}): no barrier between the read and the delete")


def _earlier_training_pass(source: Source, read: _Access, delete: _Access) -> bool:
    """`torch.load(f"ckpts/epoch{epoch}.pt")`, then `os.remove(f"ckpts/epoch{epoch - 2}.pt")` in one
    loop that trains: the file deleted was read passes ago, and the DDP steps between order it."""
    loop = _common_loop(source, read.node, delete.node)
    trains = loop is not None and any(isinstance(node, ast.Call) and last_part(node.func) == "backward"
                                      for node in ast_walk.walk(loop))
    return trains and bool(read.fields) and bool(delete.fields) and read.fields != delete.fields


def _common_loop(source: Source, first: ast.AST, second: ast.AST) -> Optional[ast.AST]:
    around_second = set(source.ancestors(second))
    for ancestor in source.ancestors(first):
        if isinstance(ancestor, FUNCTIONS):
            return None
        if isinstance(ancestor, LOOPS) and ancestor in around_second:
            return ancestor
    return None


def _accesses(source: Source, scope: Scope) -> Iterator[_Access]:
    shapes = _Shapes(source, scope)
    for call in source.calls_in(scope):
        found = _access(call)
        if found is not None:
            kind, path = found
            if (kind == "read") != source.guarded(call):
                yield _Access(kind, ast.unparse(path), _parts(path), call, False, shapes.of(path), shapes.fields(path))
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
    if isinstance(call.func, ast.Attribute) and call.func.attr in ("unlink", "rmdir") and not call.args:
        return "delete", call.func.value  # pathlib: `stale.unlink()`, `work.rmdir()`
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


_GLOBS = frozenset({"glob", "iglob", "rglob"})
_SAME = frozenset({"str", "Path", "pathlib.Path", "sorted", "list", "os.fspath"})


class _Shapes:
    """The shape of a path in one scope: strings as written, `*` for a computed part, `<name>`
    for a name or attribute whose value is not known, a glob's pattern for its loop variable,
    and a name bound once in the scope read through."""

    def __init__(self, source: Source, scope: Scope) -> None:
        self.source, self.scope = source, scope
        self._bound: Optional[dict[str, list[ast.expr]]] = None  # name -> values, built on first use

    def of(self, node: ast.expr, depth: int = 0) -> Optional[str]:
        shape = self._shape(node, depth)
        return shape if shape is not None and shape.strip("*/") else None

    def fields(self, node: ast.expr, depth: int = 0) -> tuple[str, ...]:
        """The code of the expressions formatted into the path, through names bound once."""
        if depth > 4:
            return ()
        if isinstance(node, ast.JoinedStr):
            return tuple(ast.unparse(part.value) for part in node.values if isinstance(part, ast.FormattedValue))
        if isinstance(node, ast.Name):
            values = self._bound_values(node)
            return self.fields(values[0], depth + 1) if len(values) == 1 else ()
        if isinstance(node, ast.Call) and (dotted(node.func) in ("os.path.join", "osp.join") or dotted(
                node.func) in _SAME):
            return tuple(field for arg in node.args for field in self.fields(arg, depth + 1))
        if isinstance(node, ast.BinOp):
            return self.fields(node.left, depth + 1) + self.fields(node.right, depth + 1)
        return ()

    def _shape(self, node: ast.expr, depth: int) -> Optional[str]:
        if depth > 4:
            return None
        if isinstance(node, ast.Constant):
            return node.value if isinstance(node.value, str) else None
        if isinstance(node, ast.JoinedStr):
            return "".join(str(part.value) if isinstance(part, ast.Constant) else _held(
                cast(ast.FormattedValue, part).value) for part in node.values)
        if isinstance(node, ast.BinOp):
            return self._binary(node, depth)
        if isinstance(node, ast.Subscript):
            return self._shape(node.value, depth + 1)
        if isinstance(node, ast.Call):
            return self._call(node, depth)
        if isinstance(node, ast.Name):
            return self._name(node, depth)
        return _held(node)

    def _part(self, node: ast.expr, depth: int) -> str:
        return self._shape(node, depth + 1) or "*"

    def _binary(self, node: ast.BinOp, depth: int) -> Optional[str]:
        if isinstance(node.op, ast.Add):
            return self._part(node.left, depth) + self._part(node.right, depth)
        if isinstance(node.op, ast.Div):
            return self._part(node.left, depth) + "/" + self._part(node.right, depth)
        if isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant) and isinstance(node.left.value, str):
            return re.sub(r"%[-+ #0-9.]*[a-zA-Z]", "*", node.left.value)
        return None

    def _call(self, call: ast.Call, depth: int) -> Optional[str]:
        name, last = dotted(call.func) or "", last_part(call.func)
        if name in ("os.path.join", "osp.join") and call.args:
            return "/".join(self._part(arg, depth) for arg in call.args)
        if name in _SAME and call.args:
            return self._shape(call.args[0], depth + 1)
        if last in _GLOBS and isinstance(call.func, ast.Attribute) and name not in ("glob.glob", "glob.iglob"):
            return self._part(call.func.value, depth) + "/" + (self._part(call.args[0], depth) if call.args else "*")
        if last in _GLOBS and call.args:
            return self._shape(call.args[0], depth + 1)
        if last == "format" and isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Constant) \
                and isinstance(call.func.value.value, str):
            return re.sub(r"\{[^{}]*\}", "*", call.func.value.value)
        return None

    def _name(self, name: ast.Name, depth: int) -> Optional[str]:
        for ancestor in self.source.ancestors(name):
            if isinstance(ancestor, (ast.For, ast.comprehension)) and isinstance(ancestor.target, ast.Name) \
                    and ancestor.target.id == name.id:
                globbed = [call for call in ast_walk.walk(ancestor.iter)
                           if isinstance(call, ast.Call) and last_part(call.func) in _GLOBS]
                return self._shape(globbed[0], depth + 1) if globbed else _held(name)
        values = self._bound_values(name)
        return (self._shape(values[0], depth + 1) if len(values) == 1 else None) or _held(name)

    def _bound_values(self, name: ast.Name) -> list[ast.expr]:
        if self._bound is None:
            self._bound = {}
            for node in ast_walk.walk(self.scope):
                if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and node.value is not None \
                        and self.source.scope_of(node) is self.scope:
                    for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                        if isinstance(target, ast.Name):
                            self._bound.setdefault(target.id, []).append(node.value)
        return self._bound.get(name.id, [])


def _held(node: ast.expr) -> str:
    name = dotted(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
    return f"<{name}>" if name is not None else "*"


def _shapes_meet(read: Optional[str], deleted: Optional[str]) -> bool:
    """The file read may be the one deleted (a glob pattern among them), or lie in that folder."""
    if read is None or deleted is None:
        return False
    return fnmatch.fnmatchcase(read, deleted) or fnmatch.fnmatchcase(deleted, read) or fnmatch.fnmatchcase(
        read, deleted.rstrip("/") + "/*")
