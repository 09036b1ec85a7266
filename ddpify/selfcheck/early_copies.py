"""Copies of a wrapped model made before its wrap (DDP951).

A module whose weights are taken from the model's before `model = DDP(model)` (an EMA or a
teacher made by `copy.deepcopy(model)` or by a helper or class of the file that deep-copies it, a
target network given `model.state_dict()`) holds this rank's own initial weights: the wrap
broadcasts rank 0's to the model only. Unless the script seeds torch, the copy must take rank 0's
weights after it is made (a `dist.broadcast` over its parameters) or be made anew after the wrap;
otherwise every rank keeps a different EMA, teacher or target network for the whole run, silently.

Conservative: it speaks only of copies it recognises in the wrap's own scope, before the wrap, and
says nothing in a script that calls a seeding function anywhere (a call named `*seed*`), nor of a
copy DDP wraps itself. torch's AveragedModel is not judged: its first `update_parameters` copies
the model's weights.
"""
import ast
from collections.abc import Iterator
from typing import Optional

from ddpify.selfcheck.models import DDP_WRAPPERS, Finding, wraps
from ddpify.selfcheck.source import FUNCTIONS, Scope, Source, assigned_targets, dotted, last_part

# Calls whose result is a module copied from the one they are handed (timm's EMA modules).
_MODULE_COPIES = frozenset({"deepcopy", "ModelEmaV2", "ModelEmaV3"})


def copies_never_synced(migrated: Source) -> Iterator[Finding]:
    """DDP951: a copy of a wrapped model, made before the wrap in the wrap's scope, that no
    `dist.broadcast` over its parameters (nor a new binding of its name after the wrap) follows."""
    if any("seed" in (last_part(call.func) or "").lower() for call in migrated.calls):
        return  # `torch.manual_seed(0)`, `seed_everything(...)`, a `set_seed` of the script: said nothing
    wrapped = {model for model, _ in wraps(migrated)}
    for model, wrap in wraps(migrated):
        if last_part(wrap.func) not in DDP_WRAPPERS:
            continue
        scope = migrated.scope_of(wrap)
        sources = _names_holding(migrated, scope, model, wrap.lineno)
        for copy, line in _copies_before(migrated, scope, sources, wrap.lineno):
            # A copy wrapped in DDP itself (a second trained model) takes rank 0's weights there.
            if copy not in wrapped and not _synced(migrated, scope, copy, line, wrap.lineno):
                yield ("DDP951", line,
                       f"`{copy}` takes `{model}`'s weights before its wrap (output line {wrap.lineno}) and never "
                       f"takes rank 0's after: without a seed each rank keeps its own copy for the whole run")


def _names_holding(source: Source, scope: Scope, model: str, before: int) -> set[str]:
    """The wrapped name and the plain names it is bound from in its scope (`self.model = model`)."""
    names = {model}
    for statement in source.statements_in(scope):
        if isinstance(statement, ast.Assign) and statement.lineno < before and len(statement.targets) == 1 \
                and dotted(statement.targets[0]) == model and isinstance(statement.value, ast.Name):
            names.add(statement.value.id)
    return names


def _copies_before(source: Source, scope: Scope, sources: set[str], before: int) -> Iterator[tuple[str, int]]:
    """(name of the copy, its line) for each copy of one of `sources` made before line `before`."""
    for call in source.calls_in(scope):
        if call.lineno >= before:
            continue
        if isinstance(call.func, ast.Attribute) and call.func.attr == "load_state_dict" and call.args \
                and _state_of(call.args[0]) in sources:
            receiver = dotted(call.func.value)
            if receiver is not None and receiver not in sources:
                yield receiver, call.lineno
            continue
        if not call.args or dotted(call.args[0]) not in sources:
            continue
        name = _copy_made_by(source, call)
        target = _bound_to(source, call)
        if name is not None and target is not None and target not in sources:
            yield (target if name == "" else f"{target}.{name}"), call.lineno


def _state_of(node: ast.expr) -> Optional[str]:
    """`model` for `model.state_dict()`."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "state_dict":
        return dotted(node.func.value)
    return None


def _copy_made_by(source: Source, call: ast.Call) -> Optional[str]:
    """"" where the call returns a deep copy of its first argument (`copy.deepcopy`, a function of
    the file that returns one, a Module class of the file whose __init__ makes one); the
    attribute a plain class of the file keeps it in (`shadow` for `self.shadow = deepcopy(model)`);
    None for any other call."""
    callee = last_part(call.func)
    if callee in _MODULE_COPIES:
        return ""
    for function in source.functions.get(callee or "", ()):
        if not isinstance(function, FUNCTIONS):
            continue
        copied = [node for node in ast.walk(function)
                  if isinstance(node, ast.Call) and last_part(node.func) == "deepcopy"]
        if not copied:
            continue
        owner = source.parents.get(function)
        if isinstance(owner, ast.ClassDef):
            if any(last_part(base) == "Module" for base in owner.bases):
                return ""
            kept = [_bound_to(source, node) or "" for node in copied]
            attributes = [name[len("self."):] for name in kept if name.startswith("self.") and name.count(".") == 1]
            return attributes[0] if attributes else None
        returned = {dotted(node.value) for node in ast.walk(function) if isinstance(node, ast.Return)}
        if returned & {_bound_to(source, node) for node in copied}:
            return ""
    return None


def _bound_to(source: Source, call: ast.Call) -> Optional[str]:
    """The single name `name = call` (methods chained on the call, `.eval()`, included) binds."""
    node: ast.AST = call
    parent = source.parents.get(node)
    while isinstance(parent, ast.Attribute) and isinstance(source.parents.get(parent), ast.Call):
        node = source.parents[parent]
        parent = source.parents.get(node)
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and parent.value is node:
        return dotted(parent.targets[0])
    return None


def _synced(source: Source, scope: Scope, copy: str, made: int, wrapped: int) -> bool:
    """A broadcast over the copy's tensors after it is made, or a new copy bound to its name after the wrap."""
    for call in source.calls:
        if call.lineno > made and last_part(call.func) == "broadcast" and _over(source, call, copy):
            return True
    # `ema = copy.deepcopy(model.module)` after the wrap replaces it; `ema = ema.to(device)` does not.
    return any(statement.lineno > wrapped and copy in assigned_targets(statement)
               and not any(dotted(node) == copy for node in ast.walk(statement) if isinstance(node, ast.expr)
                           and not _is_target(statement, node))
               for statement in source.statements_in(scope))


def _is_target(statement: ast.stmt, node: ast.expr) -> bool:
    return isinstance(statement, ast.Assign) and any(node is target for target in statement.targets)


def _over(source: Source, call: ast.Call, copy: str) -> bool:
    """The broadcast sits in a loop over the copy's parameters or buffers (or takes them itself)."""
    for node in [call, *source.ancestors(call)]:
        iterated = node.iter if isinstance(node, ast.For) else node if node is call else None
        if iterated is not None and any(dotted(inner) == copy for inner in ast.walk(iterated)
                                        if isinstance(inner, (ast.Name, ast.Attribute))):
            return True
    return False
