"""A capped evaluation over a sharded loader left to measure one rank's batches (DDP953).

Rule (conservative, stdlib `ast` only): a loop that takes at most k batches (`if i >= k:
break`, `islice(loader, k)`, `zip(range(k), loader)`) of a DataLoader the output gives a
DistributedSampler, steps nothing and adds up or lists figures, with nothing gathering them in
its function, measures k batches of this rank's share: rank 0 prints the first k batches of its
own share where one process measured the loader's first k (`calc_loss_loader(train_loader,
model, device, num_batches=5)` over the training loader). The loader is followed where it is
built, into the functions of its file it is handed to, and into a top-level function of another
module of the project and the functions of that module it hands it on to (`evaluate_model(model,
train_loader, ...)` then `calc_loss_loader(train_loader, ...)` there). A break under a test the
loop does not set (`if args.dry_run: break`) is no count (DDP417 keeps rank 0's batch where it
gathers). The migration's own report of that pass (DDP213) is not said twice.
"""
import ast
from collections.abc import Iterator, Sequence
from typing import Optional

from ddpify import ast_walk
from ddpify.selfcheck.capped_gathers import _cap, _figures_of
from ddpify.selfcheck.shared_figures import (
    _gathers,
    _given_distributed_sampler,
    _imported_functions,
    _module_name,
    _names_bound_to_distributed_samplers,
    _scope,
)
from ddpify.selfcheck.source import FUNCTIONS, Source, dotted, last_part
from ddpify.selfcheck.stepped_passes import Function, _holders, _loops_over

Finding = tuple[str, int, str]
Placed = tuple[str, int, str]  # (path, line, message)
# How many functions of another module a loader is followed through.
_DEPTH = 3


def capped_share_figures(migrated: Source) -> Iterator[Finding]:
    for function, name in _sharded_holders(migrated):
        for loop in _loops_over(migrated, function, name):
            cap = _capped_measure(loop, function if function is not None else migrated.tree)
            if cap is not None and isinstance(loop, (ast.For, ast.AsyncFor)):
                yield ("DDP953", loop.lineno, f"this loop measures the first batches of `{name}` ({cap}), "
                       "which has a DistributedSampler: each rank measures its own share's, and nothing "
                       "gathers them")


def capped_share_measured_in_another_module(sources: Sequence[tuple[str, Source]]) -> Optional[Placed]:
    """(path, line, message) of the first such loop in another module of the project that a
    sharded loader is handed to, or None."""
    by_module = {_module_name(path): (path, source) for path, source in sources}
    for _, source in sources:
        imported = _imported_functions(source)
        for function, name in _sharded_holders(source):
            for handing in source.calls:
                target = imported.get(dotted(handing.func) or "")
                if target is None or target[0] not in by_module or _scope(source, handing) is not function:
                    continue
                path, callee_source = by_module[target[0]]
                found = _measured_in(callee_source, target[1], _handed(handing, _callee(callee_source, target[1]),
                                                                       name), 0)
                if found is not None:
                    line, parameter, cap = found
                    return (path, line, f"this loop measures the first batches of `{parameter}` ({cap}), handed "
                            f"a loader with a DistributedSampler by `{ast.unparse(handing.func)}(...)` in another "
                            "module: each rank measures its own share's, and nothing gathers them")
    return None


def _sharded_holders(source: Source) -> Iterator[tuple[Optional[Function], str]]:
    samplers = _names_bound_to_distributed_samplers(source)
    for call in source.calls:
        if last_part(call.func) == "DataLoader" and _given_distributed_sampler(call, samplers):
            for function, name, _ in _holders(source, call):
                yield function, name


def _capped_measure(loop: ast.AST, scope: ast.AST) -> Optional[str]:
    """What caps the loop, where it measures figures, steps nothing, and nothing in its scope
    gathers them; None otherwise."""
    if not isinstance(loop, (ast.For, ast.AsyncFor)) or not _figures_of(loop) or _gathers(scope):
        return None
    if any(isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
           and node.func.attr in ("step", "backward") for node in ast_walk.walk(loop)):
        return None
    cap = _cap(loop)
    return None if cap in (None, "flag") else cap


def _callee(source: Source, name: str) -> Optional[Function]:
    return next((node for node in source.tree.body if isinstance(node, FUNCTIONS) and node.name == name), None)


def _handed(call: ast.Call, callee: Optional[Function], name: str) -> list[str]:
    """The callee's parameters the call hands `name` to, by position or keyword."""
    if callee is None:
        return []
    positional = [arg.arg for arg in [*callee.args.posonlyargs, *callee.args.args]]
    handed = [positional[index] for index, arg in enumerate(call.args)
              if index < len(positional) and dotted(arg) == name]
    return handed + [keyword.arg for keyword in call.keywords if keyword.arg and dotted(keyword.value) == name]


def _measured_in(source: Source, function_name: str, parameters: list[str], depth: int
                 ) -> Optional[tuple[int, str, str]]:
    """(line, parameter, cap) of a capped measure over one of the parameters in the function, or
    in a function of the same module it hands the parameter on to."""
    function = _callee(source, function_name)
    if function is None or depth > _DEPTH:
        return None
    for parameter in parameters:
        for loop in _loops_over(source, function, parameter):
            cap = _capped_measure(loop, function)
            if cap is not None and isinstance(loop, (ast.For, ast.AsyncFor)):
                return loop.lineno, parameter, cap
        for call in ast_walk.walk(function):
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id != function_name:
                found = _measured_in(source, call.func.id, _handed(call, _callee(source, call.func.id), parameter),
                                     depth + 1)
                if found is not None:
                    return found
    return None
