"""One parse of a script with the stdlib `ast`, and the few facts every self-check reads.

Deliberately simple and independent of `ddpify.analysis`: names are compared as dotted
text (`model`, `self.net`), scopes are the enclosing `def`, and a guard is recognised by
the forms ddpify emits (`if is_main:`, `if is_main_process():`) and the ones people write
(`if rank == 0:`). A second opinion must not share the first one's blind spots.
"""
import ast
import warnings
from collections.abc import Iterator
from operator import attrgetter
from typing import Optional, Union

from ddpify import ast_walk

Scope = Union[ast.Module, ast.FunctionDef, ast.AsyncFunctionDef]
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
LOOPS = (ast.For, ast.AsyncFor, ast.While)

# Methods that move a module or tensor to a device or a dtype, and return it.
MOVE_METHODS = frozenset({"to", "cuda", "cpu", "xpu", "half", "float", "double", "bfloat16", "to_empty"})
# Methods that return the module they are called on: `net.eval().cpu()` moves `net`.
CHAINABLE_METHODS = MOVE_METHODS | {"eval", "train", "requires_grad_", "share_memory"}
# Views of a module that yield its submodules (the last of each pair for the named ones).
SUBMODULE_VIEWS = frozenset({"children", "modules", "named_children", "named_modules", "values", "items"})
# Names of a rank-0 flag or predicate (ddpify emits the first two).
MAIN_FLAGS = frozenset({"is_main", "is_main_process", "is_master", "main_process", "master_process",
                        "is_rank_zero", "is_rank0"})


def dotted(node: Optional[ast.AST]) -> Optional[str]:
    """`self.model` for an attribute chain on a name, `model` for a name, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def last_part(node: ast.AST) -> Optional[str]:
    """The called name of `f(...)` or `a.b.f(...)`."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def calls_named(node: ast.AST, names) -> bool:
    """Whether `node` holds a call of one of `names` (by last part), e.g. in an IfExp."""
    return any(isinstance(sub, ast.Call) and last_part(sub.func) in names for sub in ast_walk.walk(node))


# Fields that never hold a node we read: contexts (a third of all nodes), names and
# literals, and import aliases (read from the Import itself).
_LEAF_FIELDS = frozenset({"ctx", "id", "attr", "name", "arg", "module", "kind", "type_comment", "level",
                          "conversion", "is_async", "names", "simple"})
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}
# The fields that hold a block's statements (`handlers` its except clauses, `cases` a match's).
_BLOCK_FIELDS = ("body", "handlers", "orelse", "finalbody", "cases")


def parameter_names(function: Union[ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda]) -> set[str]:
    """The names a function binds as parameters (positional and keyword-only; not *args, **kwargs)."""
    arguments = function.args
    return {argument.arg for argument in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]}


def assigned_targets(statement: ast.stmt) -> list[str]:
    """Dotted names a statement binds (`a, self.b = ...`, `for x in`, `with ... as x`)."""
    if isinstance(statement, ast.Assign):
        targets = statement.targets
    elif isinstance(statement, (ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor)):
        targets = [statement.target]
    elif isinstance(statement, (ast.With, ast.AsyncWith)):
        targets = [item.optional_vars for item in statement.items if item.optional_vars is not None]
    else:
        return []
    names = []
    for target in targets:
        for element in target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]:
            name = dotted(element)
            if name is not None:
                names.append(name)
    return names


class Source:
    """A parsed script with parent links, its calls and statements, and their scopes."""

    def __init__(self, text: str, tree: Optional[ast.Module] = None) -> None:
        """`tree`: the text's tree, where the caller has already parsed it."""
        if tree is None:
            with warnings.catch_warnings():
                # Warnings about the script's code (invalid escapes) are for its author, not for us.
                warnings.simplefilter("ignore")
                tree = ast.parse(text)
        self.tree = tree
        self.parents: dict[ast.AST, ast.AST] = {}
        self.nodes: list[ast.AST] = []  # every node, in no particular order
        self.calls: list[ast.Call] = []
        self.assignments: list[Union[ast.Assign, ast.AnnAssign]] = []
        self.functions: dict[str, list[Scope]] = {}
        self.module_names: set[str] = set()  # `torch`, `np`: a call on them is no method of ours
        self.imported_as: dict[str, str] = {}  # `DL` -> `DataLoader` for `import DataLoader as DL`
        # Names `from m import n` (or `import m`) binds from a module that is not torch's: the
        # project's own code, among others (a Trainer the script hands its loader to).
        self.imported_from_elsewhere: set[str] = set()
        # What an imported name stands for: `save_file` -> `safetensors.torch.save_file` for
        # `from safetensors.torch import save_file`, `st` -> `safetensors.torch` for `import
        # safetensors.torch as st`.
        self.import_targets: dict[str, str] = {}
        self._scopes: dict[ast.AST, Scope] = {}
        self._calls_by_scope: dict[int, list[ast.Call]] = {}
        self._moves: Optional[list[tuple[str, ast.Call]]] = None
        self._moved_by: Optional[dict[int, set[str]]] = None
        self._binding_lines: dict[int, dict[str, list[int]]] = {}
        self._index()
        self.calls.sort(key=attrgetter("lineno", "col_offset"))

    def _index(self) -> None:  # noqa: C901 (the hot loop stays flat: a call per node costs)
        """One traversal (ast.walk, then a pass for the parents, would cost two), written for
        speed: it is most of the self-check's time."""
        parents, nodes, calls = self.parents, self.nodes, self.calls
        pending: list[ast.AST] = [self.tree]
        while pending:
            node = pending.pop()
            nodes.append(node)
            kind = type(node)
            fields = _CHILD_FIELDS.get(kind)
            if fields is None:
                fields = _CHILD_FIELDS[kind] = tuple(field for field in kind._fields if field not in _LEAF_FIELDS)
            for field in fields:
                value = getattr(node, field, None)
                if type(value) is list:
                    for item in value:
                        if isinstance(item, ast.AST):
                            parents[item] = node
                            pending.append(item)
                elif isinstance(value, ast.AST):
                    parents[value] = node
                    pending.append(value)
            if kind is ast.Call:
                calls.append(node)  # type: ignore[arg-type]
            elif kind is ast.Assign or kind is ast.AnnAssign:
                self.assignments.append(node)  # type: ignore[arg-type]
            elif kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
                self.functions.setdefault(self.function_key(node), []).append(node)  # type: ignore[arg-type]
            elif kind is ast.Import:
                self.module_names.update(alias.asname or alias.name.split(".")[0]
                                         for alias in node.names)  # type: ignore[attr-defined]
                self.import_targets.update((alias.asname, alias.name)
                                           for alias in node.names if alias.asname)  # type: ignore[attr-defined]
                # `import engine` then `engine.train(model, loader)`: the project's own module.
                self.imported_from_elsewhere.update(
                    alias.asname or alias.name.split(".")[0] for alias in node.names  # type: ignore[attr-defined]
                    if not alias.name.startswith("torch"))
            elif kind is ast.ImportFrom:
                self.imported_as.update((alias.asname, alias.name)
                                        for alias in node.names if alias.asname)  # type: ignore[attr-defined]
                if node.module and not node.level:  # type: ignore[attr-defined]
                    self.import_targets.update(
                        (alias.asname or alias.name, f"{node.module}.{alias.name}")  # type: ignore[attr-defined]
                        for alias in node.names)  # type: ignore[attr-defined]
                if not (node.module or "").startswith("torch"):  # type: ignore[attr-defined]
                    self.imported_from_elsewhere.update(
                        alias.asname or alias.name for alias in node.names)  # type: ignore[attr-defined]

    def qualified(self, node: ast.AST) -> Optional[str]:
        """The dotted name with its first part resolved through the imports
        (`save_file` -> `safetensors.torch.save_file`)."""
        name = dotted(node)
        if name is None:
            return None
        first, _, rest = name.partition(".")
        target = self.import_targets.get(first)
        return name if target is None else f"{target}.{rest}" if rest else target

    def function_key(self, function: ast.AST) -> str:
        """A method is called by its name; `__init__` by its class's name."""
        assert isinstance(function, FUNCTIONS)
        parent = self.parents.get(function)
        if function.name == "__init__" and isinstance(parent, ast.ClassDef):
            return parent.name
        return function.name

    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        while node in self.parents:
            node = self.parents[node]
            yield node

    def scope_of(self, node: ast.AST) -> Scope:
        """The innermost function around `node`, or the module (memoised along the way up)."""
        path = []
        scope: Optional[Scope] = None
        while scope is None:
            scope = self._scopes.get(node)
            if scope is not None:
                break
            path.append(node)
            parent = self.parents.get(node)
            if parent is None:
                scope = self.tree
            elif isinstance(parent, FUNCTIONS):
                scope = parent
            else:
                node = parent
        for visited in path:
            self._scopes[visited] = scope
        return scope

    def statement_of(self, node: ast.AST) -> ast.stmt:
        if isinstance(node, ast.stmt):
            return node
        return next(ancestor for ancestor in self.ancestors(node) if isinstance(ancestor, ast.stmt))

    def statements_in(self, scope: Scope) -> Iterator[ast.stmt]:
        """Every statement that runs in `scope` itself (not in the functions it defines)."""
        pending: list[ast.AST] = list(scope.body)
        while pending:
            node = pending.pop()
            if isinstance(node, ast.stmt):
                yield node
            if not isinstance(node, FUNCTIONS):
                # Statements, handlers and cases sit only in these list fields (of a
                # statement, a handler or a case), which come in this order in `_fields`.
                for field in _BLOCK_FIELDS:
                    children = getattr(node, field, None)
                    if children.__class__ is list:
                        pending.extend(child for child in children
                                       if isinstance(child, (ast.stmt, ast.excepthandler, ast.match_case)))

    def binding_lines(self, scope: Scope, name: str) -> list[int]:
        """The lines, in order, of the statements that run in `scope` itself and bind `name`
        (assigned_targets), read once per scope: the checks ask of every statement after a
        wrap whether its name was bound again since."""
        bindings = self._binding_lines.get(id(scope))
        if bindings is None:
            bindings = self._binding_lines[id(scope)] = {}
            for statement in self.statements_in(scope):
                for target in assigned_targets(statement):
                    bindings.setdefault(target, []).append(statement.lineno)
            for lines in bindings.values():
                lines.sort()
        return bindings.get(name, [])

    def calls_in(self, scope: Scope) -> list[ast.Call]:
        """The calls that run in `scope` itself, in source order."""
        if not self._calls_by_scope:
            for call in self.calls:
                self._calls_by_scope.setdefault(id(self.scope_of(call)), []).append(call)
        return self._calls_by_scope.get(id(scope), [])

    def move_receiver(self, call: ast.Call) -> Optional[str]:
        """`model` for `model.cuda()`, `model.to(device)`, `model.eval().cpu()` or
        `nn.DataParallel(model).to(device)` (which moves the module it wraps)."""
        if not isinstance(call.func, ast.Attribute) or call.func.attr not in MOVE_METHODS:
            return None
        receiver = call.func.value
        while isinstance(receiver, ast.Call):
            if isinstance(receiver.func, ast.Attribute) and receiver.func.attr in CHAINABLE_METHODS:
                receiver = receiver.func.value
            elif last_part(receiver.func) == "DataParallel" and receiver.args:
                receiver = receiver.args[0]
            else:
                break
        name = dotted(receiver)
        return None if name is None or name.split(".")[0] in self.module_names else name

    def is_statement_move(self, call: ast.Call) -> bool:
        """A move that is a statement of its own or the value assigned or returned (also in a
        tuple, or as the receiver of a chain): the moves a user writes to place a value, not a
        move inside an argument, which a rewrite of the call around it may legitimately fold."""
        return self._placing_statement(call) is not None

    def _placing_statement(self, call: ast.Call) -> Optional[ast.stmt]:
        """The statement whose value `call` is (is_statement_move), climbing chains, tuples and
        the arms of a conditional expression (`self.net = net.cuda() if use_cuda else net`,
        `model.cuda() if cuda else None`), or None."""
        node: ast.AST = call
        for parent in self.ancestors(call):
            chained = isinstance(parent, ast.Attribute) or (isinstance(parent, ast.Call) and parent.func is node)
            chosen = isinstance(parent, ast.IfExp) and node is not parent.test
            if chained or chosen or isinstance(parent, (ast.Tuple, ast.List)):
                node = parent
                continue
            placing = isinstance(parent, (ast.Expr, ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Return))
            return parent if placing else None  # type: ignore[return-value]
        return None

    def _built_and_moved(self, call: ast.Call) -> Optional[str]:
        """`model` for `model = Net().to(device=device, dtype=torch.float64)` (or `Net().cuda()`,
        `Net().cuda() if cuda else Net()`): a value built and moved in one assignment to one
        name. The move has no named receiver, so it is counted as a move of the name it fills:
        deleting the chained move leaves the model on the CPU as surely as deleting
        `model.to(device)` would."""
        receiver: ast.expr = call
        while isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Attribute) \
                and receiver.func.attr in CHAINABLE_METHODS:
            receiver = receiver.func.value
        if not isinstance(receiver, ast.Call):
            return None
        statement = self._placing_statement(call)
        if not isinstance(statement, (ast.Assign, ast.AnnAssign)) or statement.value is None:
            return None
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        if len(targets) != 1 or any(isinstance(node, (ast.Tuple, ast.List)) for node in ast_walk.walk(statement.value)):
            return None
        name = dotted(targets[0])
        return None if name is None or name.split(".")[0] in self.module_names else name

    def moves(self) -> list[tuple[str, ast.Call]]:
        """(receiver, call) for the device moves of named values, as statements or assigned,
        in source order."""
        if self._moves is None:
            self._moves = []
            for call in self.calls:
                receiver = self.move_receiver(call)
                if receiver is not None and self.is_statement_move(call):
                    self._moves.append((receiver, call))
                if receiver is not None and "." not in receiver:
                    self._moves.extend((element, call) for element in self._iterated_elements(call, receiver))
                    module = self._looped_module(call, receiver)
                    if module is not None:
                        self._moves.append((module, call))
                if receiver is None and isinstance(call.func, ast.Attribute) and call.func.attr in MOVE_METHODS:
                    self._moves.extend((element, call) for element in self._keyed_elements(call, call.func.value))
                    built = self._built_and_moved(call)
                    if built is not None:
                        self._moves.append((built, call))
            self._moves.extend(self._moves_through_helpers(self._moves))
            self._moves.sort(key=lambda move: (move[1].lineno, move[1].col_offset))
        return self._moves

    def _moves_through_helpers(self, moves: list[tuple[str, ast.Call]]) -> list[tuple[str, ast.Call]]:
        """`to_device(model, device)` as a statement, where a function of this file moves the
        parameter it is handed to an accelerator (`def to_device(m, d): return m.to(d)`) and
        never runs it: `nn.Module.to` moves in place, so the call moves `model`."""
        movers: dict[str, list[str]] = {}
        outer: dict[str, set[str]] = {}  # `def place(): model.to(device)`: the names read from outside
        # Per function: what it calls, declares global or nonlocal, and binds (a walk each, not per move).
        read: dict[int, tuple[set[Optional[str]], set[str], set[str]]] = {}
        for receiver, call in moves:
            scope = self.scope_of(call)
            if isinstance(scope, FUNCTIONS) and self.functions.get(scope.name) == [scope] \
                    and last_part(call.func) in ("to", "cuda") and not _to_the_cpu(call):
                if id(scope) not in read:
                    read[id(scope)] = _calls_declarations_and_bindings(scope)
                called, declared, bound = read[id(scope)]
                parameters = [argument.arg for argument in scope.args.posonlyargs + scope.args.args]
                if receiver in parameters and receiver not in called:
                    movers.setdefault(scope.name, parameters)
                elif "." not in receiver and receiver not in parameters and (
                        receiver in declared or receiver not in bound):
                    # The enclosing scope's variable: declared global (or nonlocal), or never bound.
                    outer.setdefault(scope.name, set()).add(receiver)
        found: list[tuple[str, ast.Call]] = []
        for call in self.calls:
            if not (isinstance(call.func, ast.Name) and isinstance(self.parents.get(call), ast.Expr)):
                continue
            callee = call.func.id
            found.extend((name, call) for name in sorted(outer.get(callee, ())))
            handed_as = movers.get(callee)
            if handed_as is None:
                continue
            moved = {receiver for receiver, move in moves if getattr(self.scope_of(move), "name", None) == callee}
            for parameter, argument in zip(handed_as, call.args):
                name = dotted(argument)
                if parameter in moved and name is not None:
                    found.append((name, call))
        return found

    def _keyed_elements(self, call: ast.Call, receiver: ast.expr) -> list[str]:
        """The names put into `nets` for `nets[key].to(device)` in `for key in nets:` (or
        `nets.keys()`): the loop moves each value of the dict."""
        if not (isinstance(receiver, ast.Subscript) and isinstance(receiver.value, ast.Name)
                and isinstance(receiver.slice, ast.Name)):
            return []
        container, key = receiver.value.id, receiver.slice.id
        for parent in self.ancestors(call):
            if isinstance(parent, (*FUNCTIONS, ast.ClassDef)):
                return []
            if isinstance(parent, (ast.For, ast.AsyncFor)) and isinstance(parent.target, ast.Name) \
                    and parent.target.id == key:
                return self._held_names(container, parent) if _viewed(parent.iter) in (
                    (container, None), (container, "keys")) else []
        return []

    def _iterated_elements(self, call: ast.Call, variable: str) -> list[str]:
        """`G`, `D` for a move of `m` in `for m in (G, D):`, `[m.cuda() for m in [G, D]]` or
        `map(lambda m: m.to(device), (G, D))`: the loop moves each of them."""
        child: ast.AST = call
        for parent in self.ancestors(call):
            if isinstance(parent, (*FUNCTIONS, ast.ClassDef)):
                return []
            iterated: Optional[ast.expr] = None
            if isinstance(parent, (ast.For, ast.AsyncFor)) and child is not parent.iter and (
                    isinstance(parent.target, ast.Name) and parent.target.id == variable
                    or isinstance(parent.target, ast.Tuple) and len(parent.target.elts) == 2
                    and isinstance(parent.target.elts[1], ast.Name) and parent.target.elts[1].id == variable
                    and _viewed(parent.iter)[1] == "items"):
                iterated = parent.iter
            elif isinstance(parent, (ast.ListComp, ast.SetComp, ast.GeneratorExp)) and len(parent.generators) == 1:
                target = parent.generators[0].target
                if not (isinstance(target, ast.Name) and target.id == variable):
                    return []
                iterated = parent.generators[0].iter
            elif isinstance(parent, ast.Lambda):
                outer = self.parents.get(parent)
                if not ([argument.arg for argument in parent.args.args] == [variable] and isinstance(outer, ast.Call)
                        and dotted(outer.func) == "map" and len(outer.args) == 2 and outer.args[0] is parent):
                    return []
                iterated = outer.args[1]
            if iterated is not None:
                container, view = _viewed(iterated)
                if container is not None and view != "keys":
                    return self._held_names(container, parent)
                if not isinstance(iterated, (ast.Tuple, ast.List)):
                    return []
                elements = [dotted(element) for element in iterated.elts]
                return [name for name in elements if name is not None] if all(elements) else []
            child = parent
        return []

    def _looped_module(self, call: ast.Call, variable: str) -> Optional[str]:
        """`model` for a statement move of `layer` in `for layer in model:` (or over
        `model.children()`, `model.named_modules()`, `getattr(model, "module", model)`...):
        moving each submodule moves the module."""
        if not isinstance(self.parents.get(call), ast.Expr):
            return None
        for parent in self.ancestors(call):
            if isinstance(parent, (*FUNCTIONS, ast.ClassDef, ast.Lambda)):
                return None
            if isinstance(parent, (ast.For, ast.AsyncFor)):
                iterated, target = parent.iter, parent.target
                if isinstance(iterated, ast.Call) and not iterated.args and isinstance(iterated.func, ast.Attribute) \
                        and iterated.func.attr in SUBMODULE_VIEWS:
                    if iterated.func.attr in ("named_children", "named_modules", "items") \
                            and isinstance(target, ast.Tuple) and len(target.elts) == 2:
                        target = target.elts[1]
                    iterated = iterated.func.value
                if not (isinstance(target, ast.Name) and target.id == variable):
                    return None
                if isinstance(iterated, ast.Call) and last_part(iterated.func) == "getattr" and iterated.args:
                    iterated = iterated.args[0]  # `getattr(model, "module", model)`: the raw module
                return dotted(iterated)
        return None

    def _held_names(self, name: str, loop: ast.AST) -> list[str]:
        """The plain names put into the list or dict `name` before `loop` in its scope (`nets =
        [G]`, `nets.append(D)`, `nets.insert(0, D)`, `nets += [E]`, `nets.extend([F])`, `nets =
        {"G": G}`, `nets["D"] = D`, `nets.update(E=E)`): the loop may move each of them, whatever
        else the container holds, so a wrap of one of them before the loop is misplaced."""
        held: list[str] = []
        for statement in self.statements_in(self.scope_of(loop)):
            if statement.lineno < getattr(loop, "lineno", 0):
                held.extend(_put_into(statement, name))
        return held

    def moved_by(self, statement: ast.stmt) -> set[str]:
        """The names a statement moves (`x, y = x.to(device), y.to(device)`: x and y)."""
        if self._moved_by is None:
            self._moved_by = {}
            for receiver, call in self.moves():
                self._moved_by.setdefault(id(self.statement_of(call)), set()).add(receiver)
        return self._moved_by.get(id(statement), set())

    def guarded(self, node: ast.AST) -> bool:
        """Whether `node` runs only on rank 0 because of an enclosing `if`."""
        child = node
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, (ast.If, ast.IfExp)) and child is not ancestor.test:
                in_body = child in ancestor.body if isinstance(ancestor, ast.If) else child is ancestor.body
                if in_body and is_rank_zero_test(ancestor.test):
                    return True
            if isinstance(child, ast.stmt) and self._after_others_wait(child, ancestor):
                return True
            child = ancestor
        return False

    @staticmethod
    def _after_others_wait(statement: ast.stmt, parent: ast.AST) -> bool:
        """Local rank 0 goes first while the others wait at a barrier (`if local_rank != 0:
        dist.barrier()`, ddpify's download block): what it makes there, the others find made.
        Only until rank 0 releases them (`if local_rank == 0: dist.barrier()`): from there on
        every rank runs again."""
        for field in ("body", "orelse", "finalbody"):
            block = getattr(parent, field, None)
            if isinstance(block, list) and statement in block:
                waiting = False
                for earlier in block[:block.index(statement)]:
                    if _is_others_wait(earlier):
                        waiting = True
                    elif _is_release(earlier):
                        waiting = False
                return waiting
        return False


def _is_distributed_flag(node: ast.AST) -> bool:
    """`distributed`, `args.distributed`, `dist.is_initialized()`: a group of more than one."""
    if isinstance(node, ast.Call):
        node = node.func
    name = dotted(node) or ""
    return name.endswith("distributed") or name.endswith("is_initialized")


def is_rank_zero_test(test: ast.AST) -> bool:
    """`is_main`, `is_main_process()`, `rank == 0`, `dist.get_rank() == 0`, `x and is_main`,
    `not distributed or dist.get_rank() == 0`, `not distributed` (a group of one)."""
    if isinstance(test, ast.Call):
        return last_part(test.func) in MAIN_FLAGS
    if isinstance(test, (ast.Name, ast.Attribute)):
        return last_part(test) in MAIN_FLAGS
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _is_distributed_flag(test.operand)
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return any(is_rank_zero_test(value) for value in test.values)
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        return all(is_rank_zero_test(value) for value in test.values)
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
        sides = [test.left, test.comparators[0]]
        zero = any(isinstance(side, ast.Constant) and side.value == 0 for side in sides)
        return zero and any(_names_a_rank(side) for side in sides)
    return False


def _names_a_rank(node: ast.AST) -> bool:
    if isinstance(node, ast.Call) and last_part(node.func) == "int" and len(node.args) == 1:
        node = node.args[0]  # `int(os.environ.get("LOCAL_RANK", 0))`: each machine's local rank 0
        return any(isinstance(inner, ast.Constant) and inner.value in ("RANK", "LOCAL_RANK")
                   for inner in ast_walk.walk(node))
    if isinstance(node, ast.Call):
        return last_part(node.func) in ("get_rank", "get_local_rank")
    name = last_part(node) or ""
    return name.endswith("rank")


def _is_release(statement: ast.stmt) -> bool:
    """`if local_rank == 0: dist.barrier()`: rank 0 lets the waiting ranks go."""
    if not isinstance(statement, ast.If) or not any(
            isinstance(node, ast.Compare) and isinstance(node.ops[0], ast.Eq) and any(
                _names_a_rank(side) for side in [node.left, *node.comparators])
            for node in ast_walk.walk(statement.test)):
        return False
    return any(isinstance(node, ast.Call) and last_part(node.func) == "barrier" for node in ast_walk.walk(statement))


def _is_others_wait(statement: ast.stmt) -> bool:
    if not isinstance(statement, ast.If) or not any(
            isinstance(node, ast.Compare) and isinstance(node.ops[0], ast.NotEq) and any(
                _names_a_rank(side) for side in [node.left, *node.comparators])
            for node in ast_walk.walk(statement.test)):
        return False
    return any(isinstance(node, ast.Call) and last_part(node.func) == "barrier" for node in ast_walk.walk(statement))


def _calls_declarations_and_bindings(function: Union[ast.FunctionDef, ast.AsyncFunctionDef]
                                      ) -> tuple[set[Optional[str]], set[str], set[str]]:
    """What the function calls (dotted), the names it declares global or nonlocal, and the
    names it binds (stores)."""
    called: set[Optional[str]] = set()
    declared: set[str] = set()
    bound: set[str] = set()
    for node in ast_walk.walk(function):
        if isinstance(node, ast.Call):
            called.add(dotted(node.func))
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            declared.update(node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
    return called, declared, bound


def _to_the_cpu(call: ast.Call) -> bool:
    """`m.to("cpu")`, `m.to(device="cpu")`."""
    arguments = [*call.args, *(keyword.value for keyword in call.keywords if keyword.arg == "device")]
    return bool(arguments) and isinstance(arguments[0], ast.Constant) and arguments[0].value == "cpu"


def _viewed(iterated: ast.expr) -> tuple[Optional[str], Optional[str]]:
    """("nets", None) for `nets`; ("nets", "values") for `nets.values()`, likewise `items` and
    `keys`; (None, None) for anything else."""
    if isinstance(iterated, ast.Name):
        return iterated.id, None
    if isinstance(iterated, ast.Call) and not iterated.args and isinstance(iterated.func, ast.Attribute) \
            and isinstance(iterated.func.value, ast.Name) and iterated.func.attr in ("values", "items", "keys"):
        return iterated.func.value.id, iterated.func.attr
    return None, None


def _put_into(statement: ast.stmt, name: str) -> list[str]:
    """The plain names a statement puts into the container `name` (_held_names)."""
    targets = statement.targets if isinstance(statement, ast.Assign) else (
        [statement.target] if isinstance(statement, ast.AugAssign) else [])
    if isinstance(statement, (ast.Assign, ast.AugAssign)) and any(
            isinstance(target, ast.Name) and target.id == name for target in targets):
        return _names_in(statement.value)
    if isinstance(statement, ast.Assign) and any(
            isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and target.value.id == name
            for target in targets):
        return [element for element in [dotted(statement.value)] if element is not None]
    call = statement.value if isinstance(statement, ast.Expr) else None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
            and isinstance(call.func.value, ast.Name) and call.func.value.id == name):
        return []
    if call.func.attr in ("append", "insert") and call.args:
        return [element for element in [dotted(call.args[-1])] if element is not None]
    if call.func.attr == "extend" and call.args:
        return _names_in(call.args[0])
    if call.func.attr == "update":
        return _names_in(ast.Call(ast.Name("dict"), call.args, call.keywords))
    return []


def _names_in(value: ast.expr) -> list[str]:
    """The plain names a list, tuple or dict literal (or `dict(...)`) holds."""
    if isinstance(value, (ast.Tuple, ast.List)):
        return [element for node in value.elts if (element := dotted(node)) is not None]
    if isinstance(value, ast.Dict):
        return [element for node in value.values if (element := dotted(node)) is not None]
    if isinstance(value, ast.Call) and dotted(value.func) == "dict":
        return [element for node in [*value.args, *(keyword.value for keyword in value.keywords)]
                for element in (_names_in(node) if isinstance(node, ast.Dict) else [dotted(node)])
                if element is not None]
    return []
