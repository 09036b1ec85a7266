"""Names a scope reads where they are not bound on every path to the read (DDP919, possibly
unbound): a sampler assigned in one arm of an `if` and read after it, a name bound in a `try`
whose handler carries on, a name read above its first assignment. Python raises
UnboundLocalError (NameError at module level) on the path that skipped the binding.

A small definite-assignment analysis over the stdlib `ast`, one scope at a time (the module
and each function; class bodies are skipped, their methods are not). It is built to stay
silent on correct code rather than to find every defect:
- a loop body is taken to run at least once (a name bound in it is bound after it);
- a name bound under a condition counts as bound where the same condition (its text) holds
  again: `if distributed: sampler = ...` then `if distributed: sampler.set_epoch(e)`, or
  `sampler if distributed else None`;
- a handler that raises, returns or exits (`sys.exit`, `parser.error`) ends its path;
- a function's read of a module name is taken to run after the module's top level (from its
  `if __name__ == "__main__":` block): it is found only where the name is not bound at the
  end of the module on every path (the `__main__` block's bindings count), nor under a
  condition that holds at the read;
- names a function declares `global` or `nonlocal`, and a scope that calls `exec`,
  `globals()`, `locals()` or `vars()`, are left alone.
"""
import ast
from collections.abc import Iterable, Iterator, Sequence
from typing import Optional

from ddpify import ast_walk

Literal = tuple[str, bool]  # a condition's text, and whether it holds
Key = tuple[str, str]  # (the scope's qualified name, the name)
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_SCOPES = (*_FUNCTIONS, ast.ClassDef, ast.Lambda)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_EXITS = frozenset({"sys.exit", "exit", "quit", "os._exit", "os.abort"})
_DYNAMIC = frozenset({"exec", "globals", "locals", "vars"})
# The literal of `if __name__ == "__main__":`, spelt as _literals spells a condition.
_MAIN: Literal = (ast.unparse(ast.parse('__name__ == "__main__"', mode="eval").body), True)


class _State:
    """The names bound on every path here, and the names bound where a condition holds."""

    __slots__ = ("bound", "when")

    def __init__(self, bound: Iterable[str] = (), when: Optional[dict[str, frozenset[Literal]]] = None) -> None:
        self.bound = set(bound)
        self.when: dict[str, frozenset[Literal]] = dict(when or {})

    def copy(self) -> "_State":
        return _State(self.bound, self.when)

    def bind(self, names: Iterable[str]) -> "_State":
        self.bound.update(names)
        return self


def _merge(paths: Sequence[tuple[Optional[_State], frozenset[Literal]]]) -> Optional[_State]:
    """The state where paths (each with the literals that held along it) join; None where
    none of them reaches it."""
    live = [(state, literals) for state, literals in paths if state is not None]
    if not live:
        return None
    bound = set.intersection(*(state.bound for state, _ in live))
    when: dict[str, set[Literal]] = {}
    for state, literals in live:
        for name, conditions in state.when.items():
            when.setdefault(name, set()).update(conditions)
        for name in state.bound - bound:
            when.setdefault(name, set()).update(literals)
    return _State(bound, {name: frozenset(c) for name, c in when.items() if name not in bound})


def _literals(test: ast.expr, holds: bool) -> frozenset[Literal]:
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _literals(test.operand, not holds)
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And if holds else ast.Or):
        return frozenset().union(*(_literals(value, holds) for value in test.values))
    return frozenset({(ast.unparse(test), holds)})


def _target_names(target: ast.AST) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [name for element in target.elts for name in _target_names(element)]
    if isinstance(target, ast.Starred):
        return _target_names(target.value)
    return []


def _pattern_names(pattern: ast.AST) -> list[str]:
    return [name for node in ast_walk.walk(pattern)
            for name in [getattr(node, "name", None), getattr(node, "rest", None)] if isinstance(name, str)]


class _Scope:
    """The definite-assignment walk of one scope's body."""

    def __init__(self, local: set[str]) -> None:
        self.local = local
        self.found: dict[str, ast.Name] = {}  # name -> its first read that may be unbound
        # The reads of other scopes' names, with the conditions that hold there.
        self.outer: list[tuple[ast.Name, frozenset[Literal]]] = []
        self.loops: list[tuple[list[_State], list[_State]]] = []  # (breaks, continues)

    # -- expressions --
    def read(self, node: Optional[ast.AST], state: _State, facts: frozenset[Literal],
             shadowed: frozenset[str] = frozenset()) -> None:
        if node is None:
            return
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load) and node.id not in shadowed:
                self.name(node, state, facts)
            return
        if isinstance(node, ast.NamedExpr):
            self.read(node.value, state, facts, shadowed)
            state.bind(_target_names(node.target))
        elif isinstance(node, ast.Lambda):
            for default in [*node.args.defaults, *node.args.kw_defaults]:
                self.read(default, state, facts, shadowed)
        elif isinstance(node, _COMPREHENSIONS):
            self.comprehension(node, state, facts, shadowed)
        elif isinstance(node, ast.IfExp):
            self.read(node.test, state, facts, shadowed)
            self.read(node.body, state, facts | _literals(node.test, True), shadowed)
            self.read(node.orelse, state, facts | _literals(node.test, False), shadowed)
        elif isinstance(node, ast.BoolOp):
            held = facts
            for value in node.values:
                self.read(value, state, held, shadowed)
                held = held | _literals(value, isinstance(node.op, ast.And))
        else:
            for child in ast_walk.child_nodes(node):
                self.read(child, state, facts, shadowed)

    def name(self, node: ast.Name, state: _State, facts: frozenset[Literal]) -> None:
        if node.id not in self.local:
            self.outer.append((node, facts))
        elif node.id not in state.bound and not (state.when.get(node.id, frozenset()) & facts):
            self.found.setdefault(node.id, node)

    def comprehension(self, node, state: _State, facts: frozenset[Literal], shadowed: frozenset[str]) -> None:
        """Its targets are its own; the first iterable is read in the enclosing scope."""
        inner = shadowed | {name for generator in node.generators for name in _target_names(generator.target)}
        for index, generator in enumerate(node.generators):
            self.read(generator.iter, state, facts, shadowed if index == 0 else inner)
            for condition in generator.ifs:
                self.read(condition, state, facts, inner)
        parts = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        for part in parts:
            self.read(part, state, facts, inner)

    # -- statements --
    def block(self, statements: Sequence[ast.stmt], state: Optional[_State],
              facts: frozenset[Literal]) -> Optional[_State]:
        for statement in statements:
            if state is None:
                return None  # the rest of the block is unreachable
            state = self.statement(statement, state, facts)
        return state

    def statement(self, node: ast.stmt, state: _State, facts: frozenset[Literal]) -> Optional[_State]:  # noqa: C901
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            value = node.value
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if isinstance(node, ast.AugAssign):
                self.read(ast.Name(node.target.id, ast.Load(), lineno=node.lineno, col_offset=node.col_offset)
                          if isinstance(node.target, ast.Name) else node.target, state, facts)
            self.read(value, state, facts)
            for target in targets:
                for sub in ast_walk.walk(target):  # `a[i] = ...`, `self.x = ...` read their base
                    if isinstance(sub, (ast.Subscript, ast.Attribute)):
                        self.read(sub.value, state, facts)
                        if isinstance(sub, ast.Subscript):
                            self.read(sub.slice, state, facts)
            if value is not None:
                state.bind(name for target in targets for name in _target_names(target))
            return state
        if isinstance(node, (ast.Return, ast.Raise)):
            for child in ast_walk.child_nodes(node):
                self.read(child, state, facts)
            return None
        if isinstance(node, ast.Expr):
            self.read(node.value, state, facts)
            return None if _exits(node.value) else state
        if isinstance(node, ast.Assert):
            self.read(node.test, state, facts)
            self.read(node.msg, state, facts)
            return None if isinstance(node.test, ast.Constant) and not node.test.value else state
        if isinstance(node, (ast.Break, ast.Continue)):
            if self.loops:
                self.loops[-1][0 if isinstance(node, ast.Break) else 1].append(state)
            return None
        if isinstance(node, ast.If):
            self.read(node.test, state, facts)
            if isinstance(node.test, ast.Constant):  # `if True:`: one arm only ever runs
                return self.block(node.body if node.test.value else node.orelse, state, facts)
            yes, no = _literals(node.test, True), _literals(node.test, False)
            body = self.block(node.body, state.copy(), facts | yes)
            orelse = self.block(node.orelse, state.copy(), facts | no)
            return _merge([(body, yes), (orelse, no)])
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            return self.loop(node, state, facts)
        if isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            return self.try_(node, state, facts)
        if isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                self.read(item.context_expr, state, facts)
                if item.optional_vars is not None:
                    state.bind(_target_names(item.optional_vars))
            return self.block(node.body, state, facts)
        if isinstance(node, ast.Match):
            self.read(node.subject, state, facts)
            ends: list[tuple[Optional[_State], frozenset[Literal]]] = []
            for case in node.cases:
                arm = state.copy().bind(_pattern_names(case.pattern))
                self.read(case.guard, arm, facts)
                ends.append((self.block(case.body, arm, facts), frozenset()))
            last = node.cases[-1].pattern if node.cases else None
            if not (isinstance(last, ast.MatchAs) and last.pattern is None):
                ends.append((state, frozenset()))
            return _merge(ends)
        if isinstance(node, (*_FUNCTIONS, ast.ClassDef)):
            for decorator in node.decorator_list:
                self.read(decorator, state, facts)
            if isinstance(node, ast.ClassDef):
                for base in [*node.bases, *(keyword.value for keyword in node.keywords)]:
                    self.read(base, state, facts)
            else:
                for default in [*node.args.defaults, *node.args.kw_defaults]:
                    self.read(default, state, facts)
            return state.bind([node.name])
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            return state.bind((alias.asname or alias.name).split(".")[0] for alias in node.names if alias.name != "*")
        if isinstance(node, ast.Delete):
            for target in node.targets:
                for name in _target_names(target):
                    state.bound.discard(name)
                    state.when.pop(name, None)
                if not isinstance(target, (ast.Name, ast.Tuple, ast.List)):
                    self.read(target, state, facts)
            return state
        for child in ast_walk.child_nodes(node):  # Global, Nonlocal, Pass, type aliases
            if isinstance(child, ast.expr):
                self.read(child, state, facts)
        return state

    def loop(self, node, state: _State, facts: frozenset[Literal]) -> Optional[_State]:
        forever = isinstance(node, ast.While) and isinstance(node.test, ast.Constant) and bool(node.test.value)
        if isinstance(node, ast.While):
            self.read(node.test, state, facts)
        else:
            self.read(node.iter, state, facts)
            state = state.copy().bind(_target_names(node.target))
        breaks: list[_State] = []
        continues: list[_State] = []
        self.loops.append((breaks, continues))
        end = self.block(node.body, state.copy(), facts)
        self.loops.pop()
        # The body is taken to run at least once: its end (or a `continue`) leads on.
        finished = None if forever else _merge([(end, frozenset()), *((c, frozenset()) for c in continues)])
        if finished is not None and node.orelse:
            finished = self.block(node.orelse, finished, facts)
        return _merge([(finished, frozenset()), *((b, frozenset()) for b in breaks)])

    def try_(self, node, state: _State, facts: frozenset[Literal]) -> Optional[_State]:
        body = self.block(node.body, state.copy(), facts)
        # A handler may run after any statement of the body: only what was bound before counts.
        ends: list[tuple[Optional[_State], frozenset[Literal]]] = [
            (self.block(node.orelse, body, facts) if body is not None else None, frozenset())]
        for handler in node.handlers:
            self.read(handler.type, state, facts)
            arm = state.copy().bind([handler.name] if handler.name else [])
            ends.append((self.block(handler.body, arm, facts), frozenset()))
        after = _merge(ends)
        if node.finalbody:
            final = self.block(node.finalbody, state.copy(), facts)
            if final is None or after is None:
                return None
            after.bind(final.bound)
        return after


def _exits(value: ast.expr) -> bool:
    """`sys.exit(1)`, `parser.error("...")`: the path ends there."""
    if not isinstance(value, ast.Call):
        return False
    func = value.func
    name = ast.unparse(func)
    return name in _EXITS or (isinstance(func, ast.Attribute) and func.attr == "error"
                              and "parser" in ast.unparse(func.value))


def _own_nodes(body: Sequence[ast.stmt]) -> Iterator[ast.AST]:
    """The nodes of a scope's body, not those of the scopes it defines (their decorators and
    defaults are the scope's own, but rarely matter here)."""
    pending: list[ast.AST] = list(body)
    while pending:
        node = pending.pop()
        yield node
        if not isinstance(node, _SCOPES):
            pending.extend(ast_walk.child_nodes(node))


def _bound_in(body: Sequence[ast.stmt], arguments: Optional[ast.arguments],
              nodes: Optional[list[ast.AST]] = None) -> set[str]:
    """`nodes`: the body's own nodes (_own_nodes), where the caller has them already."""
    names: set[str] = set()
    if arguments is not None:
        names.update(a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                                     *filter(None, [arguments.vararg, arguments.kwarg])])
    if nodes is None:
        nodes = list(_own_nodes(body))
    # A comprehension's targets are its own (a walrus in it binds the scope's name).
    inner = {id(name) for node in nodes if isinstance(node, _COMPREHENSIONS)
             for generator in node.generators for name in ast_walk.walk(generator.target)}
    for node in nodes:
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load) and id(node) not in inner:
            names.add(node.id)
        elif isinstance(node, (*_FUNCTIONS, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names


class _Bodies:
    """Each body's own nodes and the names it binds, read once per possibly_unbound: the search
    for scopes and the walk of each scope both need them. Keyed by the body's id, the body kept
    beside the answer (a body made for the call, `[]`, may not lend its id to another)."""

    def __init__(self) -> None:
        self._own: dict[int, tuple[Sequence[ast.stmt], list[ast.AST]]] = {}
        self._bound: dict[int, tuple[Sequence[ast.stmt], set[str]]] = {}

    def own_nodes(self, body: Sequence[ast.stmt]) -> list[ast.AST]:
        known = self._own.get(id(body))
        if known is None or known[0] is not body:
            known = self._own[id(body)] = (body, list(_own_nodes(body)))
        return known[1]

    def bound_in(self, body: Sequence[ast.stmt], arguments: Optional[ast.arguments]) -> set[str]:
        """_bound_in(body, arguments): a body is always asked with its own function's arguments."""
        known = self._bound.get(id(body))
        if known is None or known[0] is not body:
            known = self._bound[id(body)] = (body, _bound_in(body, arguments, self.own_nodes(body)))
        return known[1]


def possibly_unbound(tree: ast.Module) -> dict[Key, ast.Name]:
    """(scope, name) -> the first read of a scope's own name that some path reaches with the
    name unbound, for the module and every function."""
    declared_elsewhere: set[str] = set()  # names some function binds in an outer scope
    # (qualified name, body, arguments, the names of the functions around it)
    scopes: list[tuple[str, Sequence[ast.stmt], Optional[ast.arguments], set[str]]] = [("", tree.body, None, set())]
    pending: list[tuple[str, ast.AST, set[str]]] = [("", tree, set())]
    bodies = _Bodies()
    while pending:
        prefix, parent, around = pending.pop()
        for node in bodies.own_nodes(getattr(parent, "body", [])):
            if isinstance(node, (ast.Global, ast.Nonlocal)):
                declared_elsewhere.update(node.names)
            if isinstance(node, (*_FUNCTIONS, ast.ClassDef)):
                name = f"{prefix}{node.name}"
                inner = around
                if isinstance(node, _FUNCTIONS):
                    scopes.append((name, node.body, node.args, around))
                    inner = around | bodies.bound_in(node.body, node.args)
                pending.append((f"{name}.", node, inner))
    found: dict[Key, ast.Name] = {}
    module_end: Optional[_State] = None
    module_names: set[str] = set()
    outer_reads: list[tuple[str, ast.Name, frozenset[Literal]]] = []
    for name, body, arguments, around in scopes:
        if any(isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _DYNAMIC
               for node in bodies.own_nodes(body)):
            continue
        walk = _Scope(bodies.bound_in(body, arguments) - declared_elsewhere)
        state = _State(walk.local & _bound_in([], arguments))  # the parameters
        end = walk.block(body, state, frozenset())
        found.update(((name, read), node) for read, node in walk.found.items())
        if not name:
            module_end, module_names = end, walk.local
        else:
            outer_reads.extend((name, node, facts) for node, facts in walk.outer if node.id not in around)
    if module_end is not None:
        for name, node, facts in outer_reads:
            conditions = module_end.when.get(node.id, frozenset())
            if node.id in module_names and node.id not in module_end.bound and _MAIN not in conditions \
                    and not conditions & facts:
                found.setdefault((name, node.id), node)
    return found
