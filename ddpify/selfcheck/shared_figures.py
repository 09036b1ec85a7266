"""An evaluation pass over a loader the output shards reads this rank's share (DDP943).

Rule (conservative, stdlib `ast` only): a DataLoader of the output whose `sampler=` is a
DistributedSampler (the call itself, or a name bound to an expression that makes one:
`DistributedSampler(ds) if distributed else None`) is read, where it is built or in a function
of this file it is handed to, by a `for` loop that
- runs without gradients (in a `with torch.no_grad()` / `inference_mode()` block, inside or
  around the loop, or in a function so decorated): an evaluation, not a step taken elsewhere;
- steps nothing and calls no backward() anywhere inside (under an `if` too);
- adds up figures (`correct += ...`, `total += ...`);
in a scope (the function, or the module for a loop at its top level) where nothing gathers
them: no all_reduce / all_gather, no `every_rank(...)`, no `evaluation_share(...)`. Its
figures are then rank 0's share of the set, printed as the whole set's, with exit 0 (the
training loader measured by `accuracy(model, train_loader)`). The migration's own report of
that pass (DDP213) is not said twice.
"""
import ast
from collections.abc import Iterator, Sequence
from typing import Optional

from ddpify import ast_walk
from ddpify.selfcheck.source import FUNCTIONS, Source, dotted, last_part
from ddpify.selfcheck.stepped_passes import Function, _holders, _loops_over

Finding = tuple[str, int, str]
Placed = tuple[str, int, str]  # (path, line, message)
GATHERS = frozenset({"all_reduce", "all_gather", "all_gather_object", "reduce", "gather", "every_rank",
                     "evaluation_share", "all_gather_into_tensor", "reduce_scatter"})
WITHOUT_GRADIENTS = frozenset({"no_grad", "inference_mode"})


def ungathered_share_figures(migrated: Source) -> Iterator[Finding]:
    samplers = _names_bound_to_distributed_samplers(migrated)
    for call in migrated.calls:
        if last_part(call.func) != "DataLoader" or not _given_distributed_sampler(call, samplers):
            continue
        for function, name, _ in _holders(migrated, call):
            for loop in _loops_over(migrated, function, name):
                if isinstance(loop, (ast.For, ast.AsyncFor)) and _evaluates(migrated, loop, function) \
                        and not _gathers(function if function is not None else migrated.tree):
                    yield ("DDP943", loop.lineno, f"this loop adds up figures over `{name}`, which has a "
                           "DistributedSampler: they are this rank's share, and nothing gathers them")


def _names_bound_to_distributed_samplers(source: Source) -> set[str]:
    return {target for node in source.assignments if isinstance(node, ast.Assign) and _makes_sampler(node.value)
            for target in (dotted(each) for each in node.targets) if target is not None}


def _makes_sampler(value: ast.AST) -> bool:
    return any(isinstance(node, ast.Call) and last_part(node.func) == "DistributedSampler"
               for node in ast_walk.walk(value))


def _given_distributed_sampler(call: ast.Call, samplers: set[str]) -> bool:
    value = next((keyword.value for keyword in call.keywords if keyword.arg == "sampler"), None)
    return value is not None and (_makes_sampler(value) or dotted(value) in samplers)


def _evaluates(source: Source, loop: ast.AST, function: Optional[Function]) -> bool:
    calls = [node for node in ast_walk.walk(loop) if isinstance(node, ast.Call)]
    if any(isinstance(call.func, ast.Attribute) and call.func.attr in ("step", "backward") for call in calls):
        return False
    adds = any(isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add) for node in ast_walk.walk(loop))
    return adds and _without_gradients(source, loop, function)


def _without_gradients(source: Source, loop: ast.AST, function: Optional[Function]) -> bool:
    blocks = [node for node in [*source.ancestors(loop), *ast_walk.walk(loop)] if isinstance(node, ast.With)]
    if any(last_part(item.context_expr.func if isinstance(item.context_expr, ast.Call) else item.context_expr)
           in WITHOUT_GRADIENTS for block in blocks for item in block.items):
        return True
    return function is not None and any(
        last_part(decorator.func if isinstance(decorator, ast.Call) else decorator) in WITHOUT_GRADIENTS
        for decorator in function.decorator_list)


def _gathers(scope: ast.AST) -> bool:
    return any(isinstance(node, ast.Call) and last_part(node.func) in GATHERS for node in ast_walk.walk(scope))


def share_measured_in_another_module(sources: Sequence[tuple[str, Source]]) -> Optional[Placed]:
    """(path, line, message) of the first such loop in a function of another module of the
    project that a sharded loader is handed to (`from metrics import accuracy` then
    `accuracy(model, train_loader)`, or `metrics.accuracy(...)` after `import metrics`), or None.
    Each file's own check cannot see the loader there; the callee is found by its module's
    file name and a top-level function's name, the argument by position or keyword."""
    by_module = {_module_name(path): (path, source) for path, source in sources}
    for _, source in sources:
        imported = _imported_functions(source)
        samplers = _names_bound_to_distributed_samplers(source)
        for call in source.calls:
            if last_part(call.func) != "DataLoader" or not _given_distributed_sampler(call, samplers):
                continue
            for function, name, _ in _holders(source, call):
                for handing in source.calls:
                    found = _measured_there(source, handing, function, name, imported, by_module)
                    if found is not None:
                        return found
    return None


def _measured_there(source: Source, handing: ast.Call, function: Optional[Function], name: str,
                    imported: dict[str, tuple[str, str]],
                    by_module: dict[str, tuple[str, Source]]) -> Optional[Placed]:
    target = imported.get(dotted(handing.func) or "")
    if target is None or target[0] not in by_module or _scope(source, handing) is not function:
        return None
    path, callee_source = by_module[target[0]]
    callee = next((node for node in callee_source.tree.body
                   if isinstance(node, FUNCTIONS) and node.name == target[1]), None)
    if callee is None or _gathers(callee):
        return None
    positional = [arg.arg for arg in [*callee.args.posonlyargs, *callee.args.args]]
    handed = [positional[index] for index, arg in enumerate(handing.args)
              if index < len(positional) and dotted(arg) == name]
    handed += [keyword.arg for keyword in handing.keywords if keyword.arg and dotted(keyword.value) == name]
    for parameter in handed:
        for loop in _loops_over(callee_source, callee, parameter):
            if isinstance(loop, (ast.For, ast.AsyncFor)) and _evaluates(callee_source, loop, callee):
                return (path, loop.lineno, f"this loop adds up figures over `{parameter}`, handed a loader "
                        f"with a DistributedSampler by `{ast.unparse(handing.func)}(...)` in another module: "
                        "they are this rank's share, and nothing gathers them")
    return None


def _scope(source: Source, node: ast.AST) -> Optional[ast.AST]:
    return next((each for each in source.ancestors(node) if isinstance(each, FUNCTIONS)), None)


def _module_name(path: str) -> str:
    return path.replace("\\", "/").rsplit("/", 1)[-1].removesuffix(".py")


def _imported_functions(source: Source) -> dict[str, tuple[str, str]]:
    """How a call names a function of another module: {`accuracy` or `metrics.accuracy`:
    (module's last name, function)}, from `from pkg.metrics import accuracy` and `import
    metrics` / `from pkg import metrics` (its attribute calls)."""
    found: dict[str, tuple[str, str]] = {}
    modules: dict[str, str] = {}
    for node in ast_walk.walk(source.tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                found[alias.asname or alias.name] = (node.module.rsplit(".", 1)[-1], alias.name)
                modules[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                modules[alias.asname or alias.name] = alias.name.rsplit(".", 1)[-1]
    for call in source.calls:
        called = dotted(call.func) or ""
        head, _, attribute = called.rpartition(".")
        if head in modules and attribute:
            found[called] = (modules[head], attribute)
    return found
