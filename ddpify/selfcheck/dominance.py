"""The wrap on every path (DDP935): in the output, every path from the start of a scope that
wraps a model to a statement that trains it passes a wrap of it, and no path moves the model
between a wrap and that training.

A path-sensitive second reading of the output, separate from the line-order checks of
models.py (DDP911): it walks each scope's statements in order and carries, per model, what
some path to the current statement may have done, joining the two arms of an `if`, the body
and the handlers of a `try`, a loop run zero, one or two times. What it knows of the model:

- a wrap: `model = DDP(model, ...)`, alone in an `if distributed:` guard (the branch that
  skips it runs a group of one, which needs none), or `model = prepare(model)` where
  `prepare`, a function of this file, wraps what it returns (a wrap in a helper called in
  one branch is a wrap on that branch only);
- a move: `model.to(...)`, `model = model.cuda()`, a helper of this file that moves what it
  is handed (Source.moved_by);
- a fresh value: `model = Net()` forgets the wraps before it;
- a training: a call of the model in a loop that calls `.backward()`, or a call of a
  function of this file that calls `.backward()` and is handed the model or reads it as a
  global.
"""
import ast
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Optional, Union

from ddpify import ast_walk
from ddpify.selfcheck.models import DDP_WRAPPERS, Finding, _training_uses, _trains_in_another_method
from ddpify.selfcheck.source import (
    FUNCTIONS,
    Scope,
    Source,
    _is_distributed_flag,
    assigned_targets,
    dotted,
    last_part,
    parameter_names,
)

Function = Union[ast.FunctionDef, ast.AsyncFunctionDef]
# Calls that end the process: a path that makes one goes no further.
_EXITS = frozenset({"sys.exit", "exit", "quit", "os._exit"})


@dataclass(frozen=True)
class _Paths:
    """What the paths that reach a statement may have done with the model."""

    unwrapped: bool  # some path reaches here with no wrap of the model since it was made
    wrapped: bool  # some path reaches here with the model wrapped
    moved_after_wrap: Optional[int] = None  # the output line of a move after a wrap, on some path

    def join(self, other: Optional["_Paths"]) -> "_Paths":
        if other is None:
            return self
        return _Paths(self.unwrapped or other.unwrapped, self.wrapped or other.wrapped,
                      self.moved_after_wrap or other.moved_after_wrap)


_FRESH = _Paths(unwrapped=True, wrapped=False)
_WRAPPED = _Paths(unwrapped=False, wrapped=True)
_NO_GROUP = _Paths(unwrapped=False, wrapped=False)  # the path of a group of one: no wrap needed


def _join(*states: Optional[_Paths]) -> Optional[_Paths]:
    found: Optional[_Paths] = None
    for state in states:
        if state is not None:
            found = state if found is None else found.join(state)
    return found


def wraps_off_the_training_path(source: Source) -> Iterator[Finding]:
    """DDP935 for each scope and model the scope wraps (or binds from a function that wraps):
    a training of the model on a path that no wrap reaches, or after a move that follows a
    wrap on some path."""
    factories = _wrapping_factories(source)
    for scope, model, raw in _wrapped_in_scopes(source, factories):
        walk = _Walk(source, scope, model, raw, factories)
        end = _join(walk.block(scope.body, _FRESH), walk.returns)
        if walk.finding is None and end is not None and end.unwrapped and model.startswith("self.") \
                and _trains_in_another_method(source, scope, model):
            # `if use_ddp: self.model = DDP(self.model)` in __init__, `self.model(x)` in train():
            # the object leaves the method with the bare model on the other path.
            walk.finding = ("DDP935", _first_wrap_line(source, scope, model), (
                f"`{model}` leaves `{getattr(scope, 'name', '')}` unwrapped on some path (its wrap sits in one "
                f"branch), and another method of the object trains it: each rank trains its own copy there; "
                f"wrap it after the branches join"))
        if walk.finding is not None:
            yield walk.finding


def _first_wrap_line(source: Source, scope: Scope, model: str) -> int:
    return min((statement.lineno for statement in source.statements_in(scope)
                if _wrap_of(source, statement) == model), default=getattr(scope, "lineno", 1))


def _wrapping_factories(source: Source) -> set[str]:
    """Functions of this file that wrap a model and return it (`def prepare(net): net.to(device);
    net = DDP(net); return net`): binding a name to their result binds it to a wrapper."""
    found: set[str] = set()
    returned: Optional[dict[int, set[Optional[str]]]] = None  # id of a function -> the names it returns
    for call in source.calls:
        if not (last_part(call.func) in DDP_WRAPPERS and call.args):
            continue
        function = source.scope_of(call)
        if not isinstance(function, FUNCTIONS) or function.name == "__init__" or function.name in found:
            continue
        if returned is None:
            returned = {}
            for node in source.nodes:
                if isinstance(node, ast.Return) and node.value is not None:
                    returned.setdefault(id(source.scope_of(node)), set()).add(dotted(node.value))
        wrapped = _wrap_of(source, source.statement_of(call))
        if wrapped is not None and wrapped in returned.get(id(function), set()):
            found.add(function.name)
    return found


def _wrap_of(source: Source, statement: ast.stmt) -> Optional[str]:
    """The name `statement` binds to a DDP wrapper: `model` for `model = DDP(model, ...)`."""
    if not isinstance(statement, ast.Assign) or len(statement.targets) != 1:
        return None
    value = statement.value
    if isinstance(value, ast.Call) and last_part(value.func) in DDP_WRAPPERS and value.args:
        return dotted(statement.targets[0])
    return None


def _factory_call(statement: ast.stmt, factories: set[str]) -> Optional[str]:
    """The name bound to what a wrapping factory returns: `model` for `model = prepare(model)`."""
    if not isinstance(statement, ast.Assign) or len(statement.targets) != 1:
        return None
    value = statement.value
    if isinstance(value, ast.Call) and last_part(value.func) in factories:
        return dotted(statement.targets[0])
    return None


def _wrapped_in_scopes(source: Source, factories: set[str]) -> list[tuple[Scope, str, str]]:
    """(scope, the name bound to the wrapper, the name of the module wrapped) for each wrap."""
    found: list[tuple[Scope, str, str]] = []
    for statement in source.assignments:
        wrapped = _wrap_of(source, statement)
        model = wrapped or _factory_call(statement, factories)
        if model is None:
            continue
        raw = (dotted(statement.value.args[0]) if wrapped else None) or model  # type: ignore[union-attr]
        scope = source.scope_of(statement)
        if all(known[0] is not scope or known[1] != model for known in found):
            found.append((scope, model, raw))
    return found


class _Walk:
    """One scope's statements in order, for one model (the module docstring)."""

    def __init__(self, source: Source, scope: Scope, model: str, raw: str, factories: set[str]) -> None:
        self.source, self.scope, self.model, self.raw, self.factories = source, scope, model, raw, factories
        self.names = {model, raw}
        self._training_functions: dict[int, bool] = {}  # id of a function -> it trains the model
        self.training = {id(source.statement_of(use)) for use in _training_uses(source, scope, [model],
                                                                                 through_calls=False)}
        self.training |= {id(source.statement_of(call)) for call in source.calls_in(scope)
                          if self._trains_in_a_function(call)}
        self.returns: Optional[_Paths] = None  # what the paths that return from the scope did
        self.breaks: list[Optional[_Paths]] = []
        self.continues: list[Optional[_Paths]] = []
        self.finding: Optional[Finding] = None

    def _trains_in_a_function(self, call: ast.Call) -> bool:
        """`train(model, loader)`, or `train(epoch)` reading the global model, where `train`, a
        function of this file, calls `.backward()`."""
        callee = last_part(call.func)
        functions = [f for f in self.source.functions.get(callee or "", ()) if isinstance(f, FUNCTIONS)]
        if not isinstance(call.func, ast.Name) or len(functions) != 1:
            return False
        function = functions[0]
        known = self._training_functions.get(id(function))
        if known is None:
            known = self._training_functions[id(function)] = any(
                last_part(inner.func) == "backward" for inner in self.source.calls_in(function))
        if not known:
            return False
        handed = {dotted(argument) for argument in [*call.args, *(keyword.value for keyword in call.keywords)]}
        if self.model in handed:
            return True
        if "." in self.model or not isinstance(self.scope, ast.Module):
            return False
        key = -id(function)  # (the same memo: whether it reads the module's model)
        if key not in self._training_functions:
            self._training_functions[key] = _reads_global(self.source, function, self.model)
        return self._training_functions[key]

    def block(self, statements: list[ast.stmt], state: Optional[_Paths]) -> Optional[_Paths]:
        for statement in statements:
            if state is None:
                return None  # after a return, a raise, a break: no path goes on from here
            state = self.statement(statement, state)
        return state

    def statement(self, statement: ast.stmt, state: _Paths) -> Optional[_Paths]:  # noqa: C901 (one arm a kind)
        if isinstance(statement, (*FUNCTIONS, ast.ClassDef)):
            return state
        if id(statement) in self.training:
            self._check_training(statement, state)
        if isinstance(statement, ast.If):
            return self._if(statement, state)
        if isinstance(statement, (ast.For, ast.AsyncFor, ast.While)):
            return self._loop(statement, state)
        if isinstance(statement, (ast.With, ast.AsyncWith)):
            return self.block(statement.body, state)
        if isinstance(statement, ast.Try) or type(statement).__name__ == "TryStar":
            return self._try(statement, state)  # type: ignore[arg-type]
        if isinstance(statement, ast.Match):
            return _join(state, *(self.block(case.body, state) for case in statement.cases))
        if isinstance(statement, ast.Return):
            self.returns = _join(self.returns, state)
            return None
        if isinstance(statement, ast.Raise) or _exits(statement):
            return None
        if isinstance(statement, ast.Break):
            self.breaks[-1] = _join(self.breaks[-1], state)
            return None
        if isinstance(statement, ast.Continue):
            self.continues[-1] = _join(self.continues[-1], state)
            return None
        return self._simple(statement, state)

    def _simple(self, statement: ast.stmt, state: _Paths) -> _Paths:
        if _wrap_of(self.source, statement) == self.model or _factory_call(statement, self.factories) == self.model:
            return _WRAPPED
        if self.model in assigned_targets(statement):
            value = getattr(statement, "value", None)
            if value is None or not any(dotted(node) in self.names for node in ast_walk.walk(value)):
                return _FRESH  # `model = Net().to(device)`: a new module (`torch.compile(model)` is not)
        if self.names & self.source.moved_by(statement) and state.wrapped and state.moved_after_wrap is None:
            return _Paths(state.unwrapped, state.wrapped, statement.lineno)
        return state

    def _if(self, statement: ast.If, state: _Paths) -> Optional[_Paths]:
        body = self.block(statement.body, state)
        orelse = self.block(statement.orelse, state)
        if body is not None and not body.unwrapped and body.wrapped and _tests_the_group(statement.test) \
                and not statement.orelse:
            # `if distributed: model = DDP(model)`: the other path runs a group of one.
            orelse = _Paths(False, False, state.moved_after_wrap)
        return _join(body, orelse)

    def _loop(self, statement: Union[ast.For, ast.AsyncFor, ast.While], state: _Paths) -> Optional[_Paths]:
        """The body run once, then again from what one run leaves (a move after a wrap in one
        pass reaches the training of the next); the loop may run zero times."""
        self.breaks.append(None)
        self.continues.append(None)
        entry = state
        end: Optional[_Paths] = None
        for _ in range(2):
            end = self.block(statement.body, entry)
            entry = _join(entry, end, self.continues[-1]) or entry
        breaks = self.breaks.pop()
        self.continues.pop()
        forever = isinstance(statement, ast.While) and isinstance(statement.test, ast.Constant) \
            and bool(statement.test.value)
        after = _join(breaks) if forever else _join(entry, breaks)
        return _join(self.block(statement.orelse, after), breaks) if statement.orelse else after

    def _try(self, statement: ast.Try, state: _Paths) -> Optional[_Paths]:
        body = self.block(statement.body, state)
        # A handler runs from any point of the body: from before it, or after it, at least.
        handling = _join(state, body) or state
        handlers = [self.block(handler.body, handling) for handler in statement.handlers]
        orelse = self.block(statement.orelse, body) if statement.orelse else body
        after = _join(orelse, *handlers)
        if statement.finalbody:
            finally_state = self.block(statement.finalbody, after or handling)
            return finally_state if after is not None else None
        return after

    def _check_training(self, statement: ast.stmt, state: _Paths) -> None:
        if self.finding is not None:
            return
        if state.unwrapped:
            self.finding = ("DDP935", statement.lineno, (
                f"`{self.model}` trains here on a path that passes no wrap of it: the wrap sits in one "
                f"branch (or in a helper called there), so the other paths train the bare model, each "
                f"rank its own copy; wrap it after the branches join, before the training"))
        elif state.moved_after_wrap is not None:
            self.finding = ("DDP935", statement.lineno, (
                f"`{self.model}` trains here after output line {state.moved_after_wrap} moved it on a path "
                f"that had already wrapped it: DDP's hooks watch the parameters it wrapped; move it before "
                f"the wrap on every path"))


def _tests_the_group(test: ast.expr) -> bool:
    """`distributed`, `dist.is_initialized()`, `distributed and any(p.requires_grad ...)`."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return any(_tests_the_group(value) for value in test.values)
    return _is_distributed_flag(test)


def _exits(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call) \
        and dotted(statement.value.func) in _EXITS


def _reads_global(source: Source, function: Function, name: str) -> bool:
    """The function calls the module's `name` (`model(x)`): it reads it, and declares it
    global or never binds it."""
    if not any(dotted(call.func) == name for call in source.calls_in(function)):
        return False
    declared = {declared for node in ast_walk.walk(function) if isinstance(node, ast.Global) for declared in node.names}
    if name in declared:
        return True
    if name in parameter_names(function):
        return False
    return not any(isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store)
                   for node in ast_walk.walk(function))
