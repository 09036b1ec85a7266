"""A decision every rank must take alike, taken on a value each rank computes on its own (DDP939).

Under DDP every rank must call each collective (the gradient all-reduce of every backward, a
gather) as many times as the others. A `break` or `return` out of a loop that trains, a
`continue` above its backward(), a `while` loop that trains, a plateau scheduler's
`step(metric)` (or a step under the test), a learning rate set, or a checkpoint loaded back,
decided on a figure of this rank's own batches, splits the ranks: one leaves the loop while the
others wait in the next all-reduce (a hang on NCCL), or the replicas train on with different
learning rates or weights.

Rule (conservative, stdlib `ast` only, on the output of a script that joins a process group):
a value is per rank when it comes, through assignments of the same function (the last one
above its use, and any later in a loop around it, which the next pass reads), from
- the batches of a loader the output gave a DistributedSampler (the targets of a `for` over it,
  where it is built or in a function of this file it is handed to; not an `enumerate` count),
- the clock (`time.time()`, `perf_counter()`, `datetime.now()`), or a draw from a global
  generator the file never seeds (`random.random()`),
- a function of this file that returns such a value, or an object fed one
  (`meter.update(loss.item())`, `history.append(...)`),
- an assignment made under a test of such a value (`bad += 1` under `if loss < best:`),
but not the size of a batch (`len(x)`, `x.shape`, `x.size(0)`: each rank's sampler hands it
batches of the same sizes),
unless it went through a collective every rank takes: `rank0_value(...)`, `every_rank(...)`,
`dist.all_reduce(t)` / `dist.broadcast(t, 0)` on the name, or a function of this file that
calls one (`reduce_mean(loss)`). A loop trains when a backward() runs in it (or in a function
of this file called in it). The finding is the test (of an `if` or a `while`) that decides,
or the call or assignment that acts. What the migration reported there (DDP902, DDP416,
DDP945, DDP408, DDP420) is not said twice.
"""
import ast
from collections.abc import Iterator
from typing import Optional, Union

from ddpify import ast_walk
from ddpify.selfcheck.shared_figures import _given_distributed_sampler, _names_bound_to_distributed_samplers
from ddpify.selfcheck.source import FUNCTIONS, LOOPS, Scope, Source, last_part
from ddpify.selfcheck.stepped_passes import _definition, _holders, _loops_over

Finding = tuple[str, int, str]
Loop = Union[ast.For, ast.AsyncFor, ast.While]

CLOCKS = frozenset({"time.time", "time.perf_counter", "time.monotonic", "time.process_time", "time.time_ns",
                    "datetime.now", "datetime.datetime.now", "datetime.utcnow", "datetime.datetime.utcnow"})
DRAWS = frozenset({"random", "uniform", "randint", "randrange", "choice", "gauss", "rand", "randn", "normal"})
AGREEING = frozenset({"rank0_value", "every_rank", "evaluation_share", "all_gather_object", "broadcast_object_list"})
COLLECTIVES = frozenset({"all_reduce", "broadcast", "all_gather", "all_gather_object", "broadcast_object_list",
                         "all_gather_into_tensor", "reduce"})
# The shortest chain of assignments ever followed: deeper is read as not per rank (no finding).
_DEPTH = 12


def decisions_on_per_rank_values(migrated: Source) -> Iterator[Finding]:
    calls = migrated.calls
    backwards = [call for call in calls if last_part(call.func) == "backward"]
    if not backwards or not any(last_part(call.func) == "init_process_group" for call in calls):
        return
    training = _Training(migrated, backwards)
    candidates = training.candidates()
    if not candidates:
        return
    reading = _PerRank(migrated)
    seen: set[int] = set()
    for node in candidates:
        found = _decision(reading, node)
        if found is not None and found[0] not in seen:
            seen.add(found[0])
            yield ("DDP939", found[0], found[1])


def _decision(reading: "_PerRank", node: ast.AST) -> Optional[tuple[int, str]]:
    """(line, message) where `node`, a candidate of _Training, decides on a per-rank value."""
    if isinstance(node, ast.While) and reading.expression(node.test, 0):
        return node.lineno, (f"`while {_short(node.test)}` trains, and its test reads a value that differs per "
                             "rank: one rank leaves the loop while the others wait in the next all-reduce")
    if isinstance(node, ast.If) and reading.expression(node.test, 0):
        return node.lineno, (f"`if {_short(node.test)}:` decides what every rank does (leaves a loop that "
                             "trains, or changes the learning rate or the weights) on a value that differs per rank")
    if isinstance(node, ast.Call) and node.args and reading.expression(node.args[0], 0):
        return node.lineno, (f"`{_short(node)}` steps a schedule on a value that differs per rank: the "
                             "replicas train on with different learning rates")
    if isinstance(node, ast.Assign) and reading.expression(node.value, 0):
        return node.lineno, "a learning rate is set from a value that differs per rank"
    return None


def _short(node: ast.AST) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 60 else text[:57] + "..."


class _Training:
    """The loops that train (a backward() runs in them, or a call of a function of this file
    that runs one) and the decisions in them (see the module's rule)."""

    def __init__(self, source: Source, backwards: list[ast.Call]) -> None:
        self.source = source
        self.backwards = backwards
        trains = {function.name for function in map(source.scope_of, backwards) if isinstance(function, FUNCTIONS)}
        training_calls = backwards + [call for call in source.calls if last_part(call.func) in trains]
        self.loops: dict[int, ast.AST] = {}
        for call in training_calls:
            for ancestor in source.ancestors(call):
                if isinstance(ancestor, FUNCTIONS):
                    break
                if isinstance(ancestor, LOOPS):
                    self.loops[id(ancestor)] = ancestor

    def candidates(self) -> list[ast.AST]:
        """While loops that train; ifs in a loop that trains whose blocks leave one (break,
        return), set a learning rate or load weights; steps given a value; learning rates set."""
        source = self.source
        found: dict[int, ast.AST] = {id(loop): loop for loop in self.loops.values() if isinstance(loop, ast.While)}
        acts: list[ast.AST] = [node for node in source.nodes if isinstance(node, (ast.Break, ast.Return))
                               or isinstance(node, ast.Continue) and self._skips_a_backward(node)]
        acts += [node for node in source.assignments if isinstance(node, ast.Assign)
                 and any(_sets_lr(target) for target in node.targets)]
        # (A step under the test: `if improved: scheduler.step()` moves one rank's schedule only.)
        acts += [call for call in source.calls if last_part(call.func) in ("load_state_dict", "step")]
        for act in acts:
            if isinstance(act, (ast.Break, ast.Continue)) and id(_loop_of(source, act)) not in self.loops:
                continue
            if not self._in_training_loop(act):
                continue
            if isinstance(act, ast.Assign):
                found[id(act)] = act
            for ancestor in source.ancestors(act):
                if isinstance(ancestor, FUNCTIONS) or not self._in_training_loop(ancestor):
                    break
                if isinstance(ancestor, ast.If):
                    found[id(ancestor)] = ancestor
        found.update((id(call), call) for call in source.calls if isinstance(call.func, ast.Attribute)
                     and call.func.attr == "step" and len(call.args) == 1 and _definition(source, call) is None
                     and self._in_training_loop(call))
        return sorted(found.values(), key=lambda node: (_line(node), getattr(node, "col_offset", 0)))

    def _skips_a_backward(self, skip: ast.Continue) -> bool:
        """`if torch.isnan(loss): continue` above the backward(): this rank skips the all-reduce."""
        loop = _loop_of(self.source, skip)
        return isinstance(loop, LOOPS) and any(
            _line(call) > skip.lineno and any(each is loop for each in self.source.ancestors(call))
            for call in self.backwards)

    def _in_training_loop(self, node: ast.AST) -> bool:
        for ancestor in self.source.ancestors(node):
            if isinstance(ancestor, FUNCTIONS):
                return False
            if id(ancestor) in self.loops:
                return True
        return False


def _loop_of(source: Source, node: ast.AST) -> Optional[ast.AST]:
    return next((each for each in source.ancestors(node) if isinstance(each, LOOPS + FUNCTIONS)), None)


class _PerRank:
    """Which values of the output differ per rank (see the module's rule)."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.functions = {node.name: node for node in source.tree.body if isinstance(node, FUNCTIONS)}
        # `reduce_mean(loss)`: a function of this file that all-reduces what it is handed.
        self.agreeing = set(AGREEING) | {function.name for function in (
            source.scope_of(call) for call in source.calls if last_part(call.func) in COLLECTIVES
            and _reduces_a_parameter(source, call)) if isinstance(function, FUNCTIONS)}
        seeded = {(source.qualified(call.func) or "").rpartition(".")[0] for call in source.calls
                  if last_part(call.func) == "seed"}
        self.clock_calls = {id(call) for call in source.calls if source.qualified(call.func) in CLOCKS
                            or (last_part(call.func) in DRAWS and _global_draw(source, call, seeded))}
        # (scope id, name) -> for loops whose targets bind this rank's batches.
        self.roots: dict[tuple[int, str], list[ast.AST]] = {}
        self.sharded_holders: set[str] = set()
        samplers = _names_bound_to_distributed_samplers(source)
        for call in source.calls:
            if last_part(call.func) == "DataLoader" and _given_distributed_sampler(call, samplers):
                self._find_roots(call)
        self._definitions: dict[int, dict[str, list[ast.AST]]] = {}
        self.modules = {(alias.asname or alias.name).split(".")[0] for node in ast_walk.walk(source.tree)
                        if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}
        self._memo: dict[tuple[int, str], bool] = {}
        self._returns_per_rank: dict[str, bool] = {}

    def _find_roots(self, loader: ast.Call) -> None:
        source = self.source
        for function, name, _ in _holders(source, loader):
            self.sharded_holders.add(name)
            readers: list[Optional[ast.AST]] = [function]
            if function is None:  # a module's loader, read as a global by its functions
                readers += [node for node in source.nodes if isinstance(node, FUNCTIONS)
                            and name not in _local_names(node)]
            for reader in readers:
                scope: Scope = reader if reader is not None else source.tree  # type: ignore[assignment]
                for loop in _loops_over(source, reader, name):  # type: ignore[arg-type]
                    if isinstance(loop, (ast.For, ast.AsyncFor)) and _iterates(loop.iter, name):
                        for target in _batch_targets(loop):
                            self.roots.setdefault((id(scope), target), []).append(loop)

    def definitions(self, scope: Scope, name: str) -> list[ast.AST]:
        """The statements of `scope` itself that bind `name` (read once per scope). A module
        a call is made on (`json.dump(stats, f)`) is fed nothing: it binds no value."""
        bound = self._definitions.get(id(scope))
        if bound is None:
            bound = self._definitions[id(scope)] = {}
            for statement in self.source.statements_in(scope):
                for each in _bound_names(statement):
                    if not (isinstance(statement, ast.Expr) and each in self.modules):
                        bound.setdefault(each, []).append(statement)
        return bound.get(name, [])

    # -- values ----------------------------------------------------------------------------

    def expression(self, value: ast.AST, depth: int) -> bool:
        """Whether `value` reads a value that differs per rank where it stands."""
        if depth > _DEPTH:
            return False
        pending = [value]
        shadowed: set[int] = set()  # names a comprehension binds itself (`for x, y in val_loader`)
        while pending:
            node = pending.pop()
            if _size_of_a_batch(node) or id(node) in shadowed:
                continue  # each rank's sampler hands it batches of the same sizes
            if isinstance(node, ast.Call):
                if last_part(node.func) in self.agreeing:
                    continue  # every rank gets the same value back
                if id(node) in self.clock_calls or self._returns_differ(node, depth):
                    return True
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and self.name(node, depth):
                return True
            if isinstance(node, (ast.Lambda, *FUNCTIONS)):
                continue
            if isinstance(node, _COMPREHENSIONS):
                if any(_iterates(generator.iter, name) for generator in node.generators
                       for name in self.sharded_holders):
                    return True  # `sum(... for x, y in train_loader)`: this rank's batches
                shadowed |= _comprehension_bound(node)
            pending.extend(ast_walk.child_nodes(node))
        return False

    def _returns_differ(self, call: ast.Call, depth: int) -> bool:
        function = _definition(self.source, call)
        if function is None:
            return False
        key = f"{function.name}:{function.lineno}"
        if key not in self._returns_per_rank:
            self._returns_per_rank[key] = False  # (a recursive function: not per rank until shown)
            self._returns_per_rank[key] = any(
                isinstance(node, ast.Return) and node.value is not None and self.source.scope_of(node) is function
                and self.expression(node.value, depth + 1) for node in ast_walk.walk(function))
        return self._returns_per_rank[key]

    def name(self, use: ast.Name, depth: int) -> bool:
        scope = self.source.scope_of(use)
        reaching = self._reaching(scope, use.id, self.source.statement_of(use), use)
        return any(self._defines_per_rank(definition, use.id, depth + 1) for definition in reaching)

    def _reaching(self, scope: Scope, name: str, statement: ast.stmt, use: Optional[ast.AST]) -> list[ast.AST]:
        """The last binding above the use, and those a loop around it makes further down (the
        next pass reads them), unless one above binds it again on every pass."""
        definitions = [each for each in self.definitions(scope, name)
                       if each is not statement or isinstance(statement, LOOPS)]
        line = statement.lineno
        header = statement.test if isinstance(statement, ast.While) else getattr(statement, "iter", None)
        # (A while's test is read again after each pass of its body.)
        enclosing = [statement] if header is not None and use is not None and any(
            use is node for node in ast_walk.walk(header)) else []
        enclosing += [each for each in self.source.ancestors(statement) if isinstance(each, LOOPS)]
        above = [each for each in definitions if _line(each) < line]
        reaching = sorted(above, key=_line)[-1:]
        path = {id(node) for node in [statement, *self.source.ancestors(statement)]}
        for loop in enclosing:
            inside = [each for each in definitions if any(a is loop for a in self.source.ancestors(each))]
            if loop is not statement and any(_line(each) < line and self._on_the_way(each, path) for each in inside):
                break  # bound again above the use on every pass: nothing from a later pass reaches it
            reaching += [each for each in inside if _line(each) >= line]
        return reaching

    def _on_the_way(self, definition: ast.AST, path: set[int]) -> bool:
        """The binding sits in a block that holds the use (or a statement around it): every pass
        that reaches the use ran it."""
        parent = self.source.parents.get(definition)
        for field in ("body", "orelse", "finalbody"):
            block = getattr(parent, field, None)
            if isinstance(block, list) and any(each is definition for each in block):
                return any(id(each) in path for each in block)
        return False

    def _defines_per_rank(self, definition: ast.AST, name: str, depth: int) -> bool:
        key = (id(definition), name)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = False  # (a cycle through loop-carried bindings: shown elsewhere or not at all)
        found = self._defined_value_differs(definition, name, depth) or self._under_a_per_rank_test(definition, depth)
        self._memo[key] = found
        return found

    def _defined_value_differs(self, definition: ast.AST, name: str, depth: int) -> bool:
        source = self.source
        if isinstance(definition, (ast.For, ast.AsyncFor)):
            roots = self.roots.get((id(source.scope_of(definition)), name), [])
            return any(loop is definition for loop in roots) or (
                name in _batch_targets(definition) and self.expression(definition.iter, depth))
        if isinstance(definition, ast.Expr) and isinstance(definition.value, ast.Call):
            call = definition.value
            if last_part(call.func) in COLLECTIVES:
                return False  # `dist.all_reduce(t)`: every rank holds the same afterwards
            return any(self.expression(arg, depth) for arg in [*call.args, *(k.value for k in call.keywords)])
        if isinstance(definition, ast.AugAssign):  # `total += loss.item()`: what it held, and what it adds
            earlier = self._reaching(source.scope_of(definition), name, definition, None)
            return self.expression(definition.value, depth) or any(
                self._defines_per_rank(each, name, depth + 1) for each in earlier)
        if isinstance(definition, (ast.Assign, ast.AnnAssign)) and definition.value is not None:
            return self.expression(_assigned_part(definition, name), depth)
        if isinstance(definition, (ast.With, ast.AsyncWith)):
            return any(self.expression(item.context_expr, depth) for item in definition.items)
        return False

    def _under_a_per_rank_test(self, definition: ast.AST, depth: int) -> bool:
        """`bad += 1` under `if val_loss >= best:`: what it holds depends on the test."""
        scope = self.source.scope_of(definition)
        child = definition
        for ancestor in self.source.ancestors(definition):
            if ancestor is scope:
                return False
            if isinstance(ancestor, (ast.If, ast.While)) and child is not ancestor.test \
                    and self.expression(ancestor.test, depth):
                return True
            child = ancestor
        return False


_COMPREHENSIONS = (ast.GeneratorExp, ast.ListComp, ast.SetComp, ast.DictComp)


def _comprehension_bound(node: Union[ast.GeneratorExp, ast.ListComp, ast.SetComp, ast.DictComp]) -> set[int]:
    """The reads, inside a comprehension, of the names its own `for` binds: those are its
    iterable's items, not the scope's names of the same spelling (which a training loop may
    bind to this rank's batches). The iterable itself is read as any value."""
    bound = {name for generator in node.generators for name in _names_of_target(generator.target)}
    parts: list[ast.AST] = [getattr(node, field) for field in ("elt", "key", "value") if hasattr(node, field)]
    parts += [condition for generator in node.generators for condition in generator.ifs]
    return {id(each) for part in parts for each in ast_walk.walk(part)
            if isinstance(each, ast.Name) and each.id in bound}


def _size_of_a_batch(node: ast.AST) -> bool:
    """`len(images)`, `images.shape[0]`, `x.size(0)`: the size of a batch, alike on every rank."""
    if isinstance(node, ast.Attribute):
        return node.attr == "shape"
    return isinstance(node, ast.Call) and (
        isinstance(node.func, ast.Name) and node.func.id == "len"
        or isinstance(node.func, ast.Attribute) and node.func.attr in ("size", "dim", "numel"))


def _reduces_a_parameter(source: Source, collective: ast.Call) -> bool:
    """The collective's tensor is a parameter of its function, or made from one in an assignment
    of the function (`rt = tensor.clone()`, `t = torch.tensor([value])`)."""
    function = source.scope_of(collective)
    if not isinstance(function, FUNCTIONS) or not collective.args:
        return False
    parameters = {argument.arg for argument in [*function.args.posonlyargs, *function.args.args]}
    reduced = collective.args[0].id if isinstance(collective.args[0], ast.Name) else None
    if reduced is None:
        return False
    made = {reduced} | {name for node in ast_walk.walk(function) if isinstance(node, ast.Assign)
                        and reduced in _bound_names(node)
                        for name in (each.id for each in ast_walk.walk(node.value) if isinstance(each, ast.Name))}
    return bool(made & parameters)


def _line(node: ast.AST) -> int:
    return getattr(node, "lineno", 0)


def _assigned_part(statement: Union[ast.Assign, ast.AnnAssign], name: str) -> ast.AST:
    """The element of a tuple value bound to `name` (`x, y = x.to(d), y.to(d)`), else the value."""
    value = statement.value
    assert value is not None
    targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
    for target in targets:
        if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)) \
                and len(target.elts) == len(value.elts):
            for element, part in zip(target.elts, value.elts):
                if name in _names_of_target(element):
                    return part
    return value


def _bound_names(node: ast.AST) -> list[str]:
    """Plain names a statement binds; a method call made for its effect (`meter.update(v)`,
    `dist.all_reduce(t)`) binds the name it is called on or handed, as far as this reading goes."""
    if isinstance(node, ast.Assign):  # (`meter.sum = reduced`: read as a binding of `meter`)
        return [name for target in node.targets for name in _names_of_target(target)] + [
            target.value.id for target in node.targets if isinstance(target, ast.Attribute)
            and isinstance(target.value, ast.Name) and target.value.id not in ("self", "cls")]
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return _names_of_target(node.target)
    if isinstance(node, (ast.For, ast.AsyncFor)):
        return _names_of_target(node.target)
    if isinstance(node, (ast.With, ast.AsyncWith)):
        return [name for item in node.items if item.optional_vars is not None
                for name in _names_of_target(item.optional_vars)]
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        call = node.value
        if last_part(call.func) in COLLECTIVES and call.args and isinstance(call.args[0], ast.Name):
            return [call.args[0].id]
        if isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name) and call.args:
            return [call.func.value.id]
    return []


def _iterates(iterated: ast.AST, name: str) -> bool:
    """The loop goes over the loader's batches (`loader`, `enumerate(tqdm(loader))`), not over a
    count of them (`range(len(loader))`)."""
    if isinstance(iterated, ast.Name):
        return iterated.id == name
    if isinstance(iterated, ast.Call) and last_part(iterated.func) != "len":
        return any(_iterates(arg, name) for arg in iterated.args)
    return False


def _local_names(function: ast.AST) -> set[str]:
    """The names a function binds itself (its parameters, its assignments): not the module's."""
    assert isinstance(function, FUNCTIONS)
    bound = {argument.arg for argument in ast.walk(function.args) if isinstance(argument, ast.arg)}
    return bound | {node.id for node in ast_walk.walk(function) if isinstance(node, ast.Name)
                    and isinstance(node.ctx, ast.Store)}


def _names_of_target(target: ast.AST) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [name for element in target.elts for name in _names_of_target(element)]
    if isinstance(target, ast.Starred):
        return _names_of_target(target.value)
    return []


def _batch_targets(loop: Union[ast.For, ast.AsyncFor]) -> list[str]:
    """The names a loop over batches binds to this rank's batch: not an `enumerate` count,
    which counts as many batches on every rank."""
    target = loop.target
    if isinstance(loop.iter, ast.Call) and last_part(loop.iter.func) == "enumerate" \
            and isinstance(target, ast.Tuple) and target.elts:
        return [name for element in target.elts[1:] for name in _names_of_target(element)]
    return _names_of_target(target)


def _sets_lr(target: ast.AST) -> bool:
    """`group["lr"] = ...`, `optimizer.param_groups[0]["lr"] = ...`."""
    return isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant) and target.slice.value == "lr"


def _global_draw(source: Source, call: ast.Call, seeded: set[str]) -> bool:
    """`random.random()`, `np.random.rand()`: a process-wide generator the file never seeds."""
    module = (source.qualified(call.func) or "").rpartition(".")[0]
    return module in ("random", "numpy.random") and module not in seeded
