"""The model's moves and its wrap: no move of the original deleted (DDP910), each `DDP(x)`
after every assignment and move of `x` on every path, before `x` trains, and no training in
a process group without any wrap (DDP911); nothing after the wrap that changes which
parameters train (DDP928) or draws them afresh (DDP929)."""
import ast
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from operator import attrgetter
from typing import Callable, Optional, Union, cast

from ddpify import ast_walk
from ddpify.analysis.part_runs import dotted_or_module, frozen_parts, part_runs
from ddpify.selfcheck.source import (
    FUNCTIONS,
    LOOPS,
    Scope,
    Source,
    assigned_targets,
    calls_named,
    dotted,
    last_part,
    parameter_names,
)

# FSDP2's fully_shard(model) shards the model in place: the same place as a DDP wrap.
DDP_WRAPPERS = ("DDP", "DistributedDataParallel")
WRAPPERS = (*DDP_WRAPPERS, "fully_shard")
# A move ddpify drops on purpose and says so: a wrapped model moved to the CPU and back.
DROPPED_MOVE_CODES = ("DDP106",)

Finding = tuple[str, int, str]  # code, line, message; the line is the original's for DDP910


def deleted_moves(original: Source, migrated: Source, dropped_lines: set[int],
                  to_original: Callable[[int], int]) -> Iterator[Finding]:
    """Each receiver (`model`, `self.net`) moves at least as often in the output as in the
    original. ddpify may respell a move (`x.cuda()` -> `x.to(device)`), never delete one,
    except a move of the wrapped model that it reported (DDP106): one after the wrap.
    `to_original` maps an output line to the original line it comes from (or follows)."""
    wrapped_after: dict[str, list[int]] = {}  # name -> the output lines of its wraps
    for name, call in wraps(migrated):
        wrapped_after.setdefault(name, []).append(call.lineno)
    original_moves: dict[str, list[ast.Call]] = {}
    for receiver, call in original.moves():
        if call.lineno in dropped_lines and any(
                to_original(line) < call.lineno and _placed_before(migrated, receiver, line)
                for line in wrapped_after.get(receiver, [])):
            continue
        original_moves.setdefault(receiver, []).append(call)
    after: dict[str, list[int]] = {}
    for receiver, call in migrated.moves():
        after.setdefault(receiver, []).append(call.lineno)
    for receiver, calls in original_moves.items():
        kept = after.get(receiver, [])
        if len(kept) < len(calls):
            kept_lines = {to_original(line) for line in kept}
            missing = next((call for call in calls if call.lineno not in kept_lines), calls[0])
            yield ("DDP910", missing.lineno,
                   f"`{ast.unparse(missing)}` is gone: `{receiver}` moves {len(calls)} time(s) in the "
                   f"original, {len(kept)} in the output")


def wraps(source: Source) -> Iterator[tuple[str, ast.Call]]:
    """(wrapped name, call) for each `DDP(name, ...)`."""
    for call in source.calls:
        if last_part(call.func) in WRAPPERS and call.args:
            name = dotted(call.args[0])
            if name is not None:
                yield name, call


def training_without_a_wrap(migrated: Source, reported: bool) -> Iterator[Finding]:
    """A script that joins a process group and trains (backward, optimizer steps) but wraps nothing: each
    rank trains its own copy on its shard, the copies drift apart and rank 0 saves its own.
    `reported`: the migration already said so (DDP903)."""
    if reported or any(True for _ in wraps(migrated)):
        return
    if not any(last_part(call.func) == "init_process_group" for call in migrated.calls):
        return
    backward = next((call for call in migrated.calls if last_part(call.func) == "backward"), None)
    # An optimizer takes steps: a backward alone (an autograd demo) trains nothing.
    steps = any(last_part(call.func) in ("step", "zero_grad") for call in migrated.calls)
    if backward is not None and steps:
        yield ("DDP911", backward.lineno, "the script joins a process group and trains, but no model is "
               "wrapped in DDP: each rank trains its own copy")


def own_model_unwrapped(source: Source, reported: bool) -> Iterator[Finding]:
    """In an output that wraps models in DDP: a function that builds a model of its own (the
    name assigned there, not a parameter) and an optimizer over its parameters, with no DDP
    call of that name in the function (`finetune()` beside a wrapped `pretrain()`, both with
    their `model`): that model trains alone on every rank. A model that leaves the function
    (returned, stored in another name or an attribute, handed whole to a callable that is not
    a function of this file without a DDP call, `Trainer(model)`) may be wrapped elsewhere and
    is left alone. `reported`: the migration already said a model is left unwrapped (DDP903)."""
    scopes_wrapping = {(id(source.scope_of(call)), name) for name, call in wraps(source)}
    if reported or not scopes_wrapping:
        return  # distributed some other way (FSDP, a framework), or nothing to wrap
    for call in source.calls:
        callee = dotted(call.func) or ""
        scope = source.scope_of(call)
        if not (isinstance(scope, FUNCTIONS) and callee.startswith(("torch.optim.", "optim."))
                and callee.rsplit(".", 1)[-1][:1].isupper() and "lr_scheduler" not in callee):
            continue
        for node in ast_walk.walk(call):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("parameters", "named_parameters") and isinstance(node.func.value, ast.Name)):
                continue
            name = node.func.value.id
            if (id(scope), name) in scopes_wrapping or not _built_here(source, scope, name) \
                    or _handed_elsewhere(source, scope, name) or _alias_wrapped(source, scope, name, scopes_wrapping):
                continue
            yield ("DDP911", call.lineno, f"`{name}` is built in `{scope.name}` and trained there (this optimizer "
                   f"takes its parameters), but no DDP call in `{scope.name}` wraps it: every rank trains its own "
                   "copy")


def _alias_wrapped(source: Source, scope: Scope, name: str, scopes_wrapping: set[tuple[int, str]]) -> bool:
    """`model = net.to(device)` or `model = torch.compile(net.to(device))`, then `DDP(model)`:
    the wrapped name is the same module as `name` (or its compiled view)."""
    for statement in source.statements_in(scope):
        if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1
                and isinstance(statement.targets[0], ast.Name)):
            continue
        value = statement.value
        while isinstance(value, ast.Call):
            if isinstance(value.func, ast.Attribute) and value.func.attr in ("to", "cuda"):
                value = value.func.value
            elif last_part(value.func) == "compile" and value.args:
                value = value.args[0]
            else:
                break
        if dotted(value) == name and (id(scope), statement.targets[0].id) in scopes_wrapping:
            return True
    return False


def _built_here(source: Source, scope: ast.AST, name: str) -> bool:
    """The function assigns `name` itself, and does not take it as a parameter."""
    assert isinstance(scope, FUNCTIONS)
    if name in parameter_names(scope):
        return False
    return any(name in assigned_targets(statement) for statement in source.statements_in(scope))


def _handed_elsewhere(source: Source, scope: Scope, name: str) -> bool:
    """`name` leaves the function: returned, stored whole (`self.model = model`, `models =
    [model]`), or handed whole to a call of anything but a function of this file with no DDP
    call in it (or in its class)."""
    for statement in source.statements_in(scope):
        value = statement.value if isinstance(statement, (ast.Return, ast.Assign, ast.AnnAssign)) else None
        if value is not None and name in _whole_names(value):
            return True
    for call in source.calls_in(scope):
        callee = dotted(call.func) or ""
        if callee in _READING_BUILTINS or name not in _whole_names(
                *call.args, *(keyword.value for keyword in call.keywords)):
            continue
        own = source.functions.get(callee)
        if not own or any(_wraps_within(source, function) for function in own):
            return True
    return False


# Builtins that only read what they are handed (`getattr(model, "module", model)`).
_READING_BUILTINS = frozenset({"getattr", "hasattr", "isinstance", "type", "id", "len", "print", "str", "repr"})


def _whole_names(*values: Optional[ast.AST]) -> set[str]:
    """Names given whole: the value itself, or an element of a tuple or list of them."""
    found: set[str] = set()
    for value in values:
        for element in value.elts if isinstance(value, (ast.Tuple, ast.List)) else [value]:
            if isinstance(element, ast.Name):
                found.add(element.id)
    return found


def _wraps_within(source: Source, function: ast.AST) -> bool:
    """A DDP call in the function, or, for a method, anywhere in its class."""
    parent = source.parents.get(function)
    where = parent if isinstance(parent, ast.ClassDef) else function
    return any(isinstance(node, ast.Call) and last_part(node.func) in WRAPPERS for node in ast_walk.walk(where))


def trained_but_unwrapped(source: Source) -> Iterator[Finding]:
    """In a file that wraps a model in DDP itself (one ddpify leaves as it is, DDP900), a
    model whose parameters an optimizer takes but no DDP call wraps (a student beside its
    wrapped teacher) trains alone on every rank. DDP900 means that ddpify will not edit the
    file, not that it has nothing to say: `--check` keeps failing until the model is wrapped."""
    wrapped: set[str] = set()
    for _, call in wraps(source):
        wrapped.update(name for node in ast_walk.walk(call.args[0]) if (name := dotted(node)) is not None)
        wrapped.update(assigned_targets(source.statement_of(call)))
    if not wrapped:
        return  # distributed some other way (FSDP, a framework): not this check's business
    # A model handed to a call as a whole (`Trainer(model, ...)`) may be wrapped there.
    wrapped.update(name for call in source.calls
                   for argument in [*call.args, *(keyword.value for keyword in call.keywords)]
                   if (name := dotted(argument)) is not None)
    for call in source.calls:
        callee = dotted(call.func) or ""
        if not (callee.startswith(("torch.optim.", "optim.")) and callee.rsplit(".", 1)[-1][:1].isupper()
                and "lr_scheduler" not in callee):
            continue
        for node in ast_walk.walk(call):
            if isinstance(node, ast.Call) and last_part(node.func) in ("parameters", "named_parameters") \
                    and isinstance(node.func, ast.Attribute):
                name = dotted(node.func.value)
                if name is not None and name != "self" and name not in wrapped:
                    yield ("DDP903", call.lineno, f"`{name}` trains (this optimizer takes its parameters) but no "
                           f"DDP call wraps it: every rank trains its own copy; wrap it in DDP by hand")
                    wrapped.add(name)


def _placed_before(source: Source, name: str, line: int) -> bool:
    """`name` moved, or assigned a moved value (`model = Net().to(device)`), or built, before
    output line `line` (its wrap): a move dropped after the wrap is then a round trip of a
    model already on its device, not the move that put it there (`for epoch in ...:
    model.to(device)` with the wrap before the loop wraps a CPU module)."""
    for receiver, call in source.moves():
        if receiver == name and call.lineno < line:
            return True
    for call in source.calls:
        if call.lineno >= line or not isinstance(call.func, ast.Attribute) or call.func.attr not in ("to", "cuda"):
            continue
        statement = source.statement_of(call)
        if isinstance(statement, (ast.Assign, ast.AnnAssign)) and statement.value is call \
                and name in assigned_targets(statement):
            return True
    return False


def misplaced_wraps(migrated: Source) -> Iterator[Finding]:
    for model, call in wraps(migrated):
        problem = _wrap_problem(migrated, model, call) or _nothing_to_train(migrated, model, call) \
            or _skipped_when_the_try_fails(migrated, model, call)
        if problem is not None:
            yield "DDP911", call.lineno, problem


def _skipped_when_the_try_fails(source: Source, model: str, wrap: ast.Call) -> Optional[str]:
    """Rule: a wrap in the body (or `else:`) of a `try:` one of whose handlers carries on
    (`except RuntimeError: print("no GPU")`) does not run on the path where the body raised
    before it: a training of the model after the `try` statement, or in that handler, then
    trains the bare model, each rank its own copy. The wrap belongs after the `try` statement,
    or in each handler that carries on as well."""
    statement = source.statement_of(wrap)
    wrapped = assigned_targets(statement) or [model]
    scope = source.scope_of(wrap)
    child: ast.AST = _anchor(source, statement)
    for ancestor in source.ancestors(child):
        if ancestor is scope:
            break
        if isinstance(ancestor, ast.Try) and (child in ancestor.body or child in ancestor.orelse):
            carrying_on = [handler for handler in ancestor.handlers
                           if _carries_on(handler.body) and not _wraps_in(handler, model)]
            if carrying_on:
                trains = [use for use in _training_uses(source, scope, [model, *wrapped], through_calls=True)
                          if use.lineno > (ancestor.end_lineno or ancestor.lineno) or any(
                              handler.lineno <= use.lineno <= (handler.end_lineno or handler.lineno)
                              for handler in carrying_on)]
                if trains:
                    return (f"the wrap of `{model}` sits in a `try:` whose `except` on output line "
                            f"{carrying_on[0].lineno} carries on without it, and `{ast.unparse(trains[0])}` on "
                            f"output line {trains[0].lineno} then trains the bare model: wrap it after the `try`")
        child = ancestor
    return None


# Calls that end the process: a handler ending in one does not carry on.
_EXITS = frozenset({"sys.exit", "exit", "quit", "os._exit"})


def _carries_on(body: list[ast.stmt]) -> bool:
    """Whether running `body` can reach the statement after it (it does not end in a raise,
    a return, a loop jump, an exit, or an `if` whose arms all end so)."""
    last = body[-1]
    if isinstance(last, (ast.Raise, ast.Return, ast.Continue, ast.Break)):
        return False
    if isinstance(last, ast.Expr) and isinstance(last.value, ast.Call) and dotted(last.value.func) in _EXITS:
        return False
    if isinstance(last, ast.If) and last.orelse:
        return _carries_on(last.body) or _carries_on(last.orelse)
    return True


def _wraps_in(node: ast.AST, model: str) -> bool:
    return any(isinstance(inner, ast.Call) and last_part(inner.func) in WRAPPERS and inner.args
               and dotted(inner.args[0]) == model for inner in ast_walk.walk(node))


# torch.nn modules that hold no parameter: DDP refuses to wrap them.
_PARAMETERLESS = frozenset({"ReLU", "LeakyReLU", "GELU", "SiLU", "Tanh", "Sigmoid", "Softmax", "LogSoftmax",
                            "Identity", "Dropout", "Flatten", "Upsample", "MaxPool2d", "AvgPool2d"})


def _nothing_to_train(source: Source, model: str, wrap: ast.Call) -> Optional[str]:
    """Rule: DDP raises at construction ("DistributedDataParallel is not needed when a module
    doesn't have any parameter that requires a gradient") when handed a torch.nn module with
    no parameter (a loss, an activation) or one its scope froze before the wrap
    (`teacher.requires_grad_(False)`, `for p in teacher.parameters(): p.requires_grad = False`)
    with no later unfreezing before the wrap."""
    if "." in model or _guarded_by_a_trainable_test(source, model, wrap):
        return None
    scope = source.scope_of(wrap)
    frozen: Optional[str] = None
    for statement in sorted(source.statements_in(scope), key=lambda node: node.lineno):
        if statement.lineno >= wrap.lineno:
            break
        if isinstance(statement, (ast.Assign, ast.AnnAssign)) and model in assigned_targets(statement):
            frozen = _parameterless(source, statement.value)
        changed = _requires_grad_set(statement, model)
        if changed is None:
            changed = _frozen_by_a_helper(source, statement, model)
        if changed is not None:
            frozen = None if changed else f"`{model}` is frozen (requires_grad off) on output line {statement.lineno}"
    if frozen is None:
        return None
    return f"the wrap is handed a module with no trainable parameter ({frozen}): DDP raises when it is built"


def _guarded_by_a_trainable_test(source: Source, model: str, wrap: ast.Call) -> bool:
    """The wrap runs only when the model has a parameter to train: under the guard ddpify
    emits for a model frozen on some path (`if distributed and any(p.requires_grad for p in
    model.parameters()):`). A frozen model then stays unwrapped; DDP is never built."""
    for ancestor in source.ancestors(wrap):
        if not isinstance(ancestor, ast.If):
            continue
        for node in ast_walk.walk(ancestor.test):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "any" \
                    and node.args and isinstance(node.args[0], ast.GeneratorExp):
                generator = node.args[0]
                over = generator.generators[0].iter
                if isinstance(generator.elt, ast.Attribute) and generator.elt.attr == "requires_grad" \
                        and isinstance(over, ast.Call) and isinstance(over.func, ast.Attribute) \
                        and over.func.attr == "parameters" and dotted(over.func.value) == model:
                    return True
    return False


def _parameterless(source: Source, value: Optional[ast.expr]) -> Optional[str]:
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in ("to", "cuda"):
        value = value.func.value
    if not isinstance(value, ast.Call):
        return None
    name = source.qualified(value.func) or ""
    first, _, last = name.rpartition(".")
    if first not in ("nn", "torch.nn") and not first.startswith("torch.nn."):
        return None
    if last in _PARAMETERLESS or (last.endswith("Loss") and "Adaptive" not in last):
        return f"`{ast.unparse(value.func)}()` holds no parameter"
    return None


def _requires_grad_set(statement: ast.stmt, model: str) -> Optional[bool]:
    """False where the statement freezes `model` (`model.requires_grad_(False)`, a loop over its
    parameters setting `requires_grad = False`), True where it unfreezes it, else None."""
    if isinstance(statement, (ast.For, ast.AsyncFor)):
        return _loop_sets_requires_grad(statement, model)
    if not isinstance(statement, ast.Expr):
        return None
    for node in ast_walk.walk(statement.value):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "requires_grad_":
            receiver = node.func.value
            while isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Attribute):
                receiver = receiver.func.value
            values = [*node.args, *(keyword.value for keyword in node.keywords)]
            if not values:
                return _applies(dotted(receiver), model, True)
            if isinstance(values[0], ast.Constant):
                return _applies(dotted(receiver), model, bool(values[0].value))
    return None


def _loop_sets_requires_grad(loop: Union[ast.For, ast.AsyncFor], model: str) -> Optional[bool]:
    """`for p in model.parameters(): p.requires_grad = False` (or `p.requires_grad_(False)`)."""
    over = loop.iter
    if not (isinstance(over, ast.Call) and isinstance(over.func, ast.Attribute)
            and over.func.attr in ("parameters", "named_parameters")):
        return None
    receiver = dotted(over.func.value)
    for node in ast_walk.walk(loop):
        if isinstance(node, ast.Assign) and any(isinstance(target, ast.Attribute)
                                                and target.attr == "requires_grad" for target in node.targets) \
                and isinstance(node.value, ast.Constant):
            return _applies(receiver, model, bool(node.value.value))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "requires_grad_" \
                and isinstance(node.func.value, ast.Name) and node.func.value.id in _names_in(loop.target):
            values = [*node.args, *(keyword.value for keyword in node.keywords)]
            if not values:
                return _applies(receiver, model, True)
            if isinstance(values[0], ast.Constant):
                return _applies(receiver, model, bool(values[0].value))
    return None


def _frozen_by_a_helper(source: Source, statement: ast.stmt, model: str) -> Optional[bool]:
    """`freeze(vgg)`, a function of this file that freezes (or unfreezes) the parameter it is
    handed: what `_requires_grad_set` says of the function's body for that parameter."""
    call = statement.value if isinstance(statement, ast.Expr) else None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
        return None
    for function in source.functions.get(call.func.id, ()):
        if not isinstance(function, FUNCTIONS):
            continue
        parameters = [argument.arg for argument in function.args.args]
        for position, argument in enumerate(call.args[:len(parameters)]):
            if dotted(argument) != model:
                continue
            for inner in function.body:
                changed = _requires_grad_set(inner, parameters[position])
                if changed is not None:
                    return changed
    return None


def _applies(receiver: Optional[str], model: str, value: bool) -> Optional[bool]:
    """The whole model frozen or unfrozen; a part of it (`model.head`) unfrozen unfreezes it."""
    if receiver == model or (value and receiver is not None and receiver.startswith(model + ".")):
        return value
    return None


def _wrap_problem(source: Source, model: str, wrap: ast.Call) -> Optional[str]:
    statement = source.statement_of(wrap)
    wrapped = assigned_targets(statement) or [model]
    loop_variable = next((name for name in assigned_targets(statement) if _loop_bound(source, statement, name)), None)
    if loop_variable is not None:
        return (f"the wrap rebinds `{loop_variable}`, a loop variable: the container the training reads "
                f"keeps its models unwrapped")
    anchor = _anchor(source, statement)
    scope = source.scope_of(wrap)
    trains_on = [use.lineno for use in _training_uses(source, scope, [model, *wrapped], through_calls=True)]
    if not trains_on and _dropped_parameter(source, scope, model):
        return (f"the wrap rebinds `{model}`, a parameter its function neither trains, keeps nor returns: "
                f"the caller's model stays unwrapped")
    for other in sorted(source.statements_in(scope), key=lambda node: node.lineno):
        if other is statement or not _places(source, other, model):
            continue
        # A model reloaded for evaluation after training is a new value, not the one wrapped.
        trains_later = any(line > other.lineno for line in trains_on)
        if not _on_every_path_to(source, other, anchor):
            if not trains_later or _wrapped_again_on_its_path(source, model, wrap, other):
                continue
            return (f"the wrap of `{model}` sits in one branch: output line {other.lineno} assigns or moves "
                    f"it on a path that does not reach the wrap, and it trains after that")
        if other.lineno > statement.lineno and (trains_later or _trains_in_another_method(source, scope, model)) \
                and not _derived_from_wrapped(source, other, wrapped):
            return (f"`{model}` is assigned or moved after its wrap, on output line {other.lineno}, "
                    f"and trains after that")
    for use in _training_uses(source, scope, wrapped, through_calls=False):
        if use.lineno < statement.lineno:
            return f"`{ast.unparse(use)}` trains on output line {use.lineno}, before its wrap"
    if scope is not source.tree:
        return None
    return _moved_later_by_a_function(source, model, wrap) or _moved_between_trainings(source, model, wrap)


def _moved_between_trainings(source: Source, model: str, wrap: ast.Call) -> Optional[str]:
    """Rule: a function of the file moves the module's global model without training it
    (`def sample(): generator.cpu(); ...; generator.cuda()`) and runs after the wrap, with
    training after it (later, or in the same loop): the wrapper's parameters leave the device
    DDP wrapped them on. On a GPU its forward with `device_ids` then meets CPU parameters, and
    a move of a DDP module is what its documentation forbids; Gloo on the CPU shows nothing."""
    module_level = [scope for scopes in source.functions.values() for scope in scopes
                    if isinstance(scope, FUNCTIONS) and source.scope_of(scope) is source.tree
                    and not _binds(scope, model)]
    movers = {function.name: moves[0] for function in module_level
              for moves in [[other for other in source.statements_in(function) if model in source.moved_by(other)]]
              if moves}
    trainers = {function.name for function in module_level
                if _training_uses(source, function, [model], through_calls=False)}
    calls = source.calls_in(source.tree)
    trainings = [call for call in calls if last_part(call.func) in trainers]
    trainings += _training_uses(source, source.tree, [model], through_calls=False)
    for call in calls:
        name = last_part(call.func)
        if name not in movers or name in trainers or call.lineno <= wrap.lineno:
            continue
        loops = {id(loop) for loop in source.ancestors(call) if isinstance(loop, LOOPS)}
        if any(training.lineno > call.lineno or any(id(loop) in loops for loop in source.ancestors(training))
               for training in trainings):
            return (f"`{model}` is moved in `{name}()` (output line {movers[name].lineno}), which runs after its "
                    f"wrap (output line {call.lineno}) with training after it: the wrapper's parameters leave "
                    f"the device it was built on; move it before the wrap, or move `{model}.module` only "
                    f"once training is over")
    return None


def _moved_later_by_a_function(source: Source, model: str, wrap: ast.Call) -> Optional[str]:
    """Rule: a model of the module wrapped there, that a function of the file moves and trains
    as the global it is (`def train(epoch): model.to(device); ...; loss.backward()`, called
    once per epoch after the wrap): the wrap comes before the move, so DDP registered the
    parameters where they were (the CPU) and the training runs on another device. The wrap
    must follow the move: move the model once, before the wrap, or wrap where it is moved."""
    for function in [scope for scopes in source.functions.values() for scope in scopes]:
        if not isinstance(function, FUNCTIONS) or source.scope_of(function) is not source.tree \
                or _binds(function, model):
            continue
        moves = [other for other in source.statements_in(function) if model in source.moved_by(other)]
        called_after = any(last_part(call.func) == function.name and call.lineno > wrap.lineno
                           for call in source.calls)
        if moves and called_after and _training_uses(source, function, [model], through_calls=False):
            return (f"`{model}` is moved in `{function.name}()` (output line {moves[0].lineno}), which trains it "
                    f"and runs after its wrap: move it to its device before the wrap")
    return None


def _binds(function: Union[ast.FunctionDef, ast.AsyncFunctionDef], name: str) -> bool:
    """`name` is a parameter of the function or assigned in it without `global`: its own, not the module's."""
    if name in parameter_names(function):
        return True
    declared = {declared for node in ast_walk.statements(function) if isinstance(node, ast.Global)
                for declared in node.names}
    stored = {node.id for node in ast_walk.walk(function)
              if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}
    return name in stored and name not in declared


def _trains_in_another_method(source: Source, scope: Scope, model: str) -> bool:
    """`self.model = DDP(self.model)` in a method (the `__init__` of a Trainer) whose class trains
    `self.model` in another method: a later `self.model = ...` of the same method throws the
    wrapper away before any training."""
    owner = source.parents.get(scope)
    if not model.startswith("self.") or not isinstance(owner, ast.ClassDef):
        return False
    methods = [method for method in owner.body if isinstance(method, FUNCTIONS) and method is not scope]
    if any(_training_uses(source, method, [model], through_calls=False) for method in methods):
        return True
    # The batch step in a method of its own (`_run_batch`: `self.model(x)`, `loss.backward()`),
    # the loop in another.
    def calls_model(call: ast.Call) -> bool:
        callee = dotted(call.func) or ""
        return callee == model or callee.startswith(model + ".")

    return any(any(last_part(call.func) == "backward" for call in source.calls_in(method))
               and any(calls_model(call) for call in source.calls_in(method)) for method in methods)


def _wrapped_again_on_its_path(source: Source, model: str, wrap: ast.Call, other: ast.stmt) -> bool:
    """`if teacher: model = A().to(dev); <wrap>; train(model)` / `else: model = B().to(dev);
    <wrap>; train(model)`: a statement on a path the first wrap does not reach is followed by
    another wrap of the same model, in the same scope, on its own path (that wrap is checked
    on its own)."""
    scope = source.scope_of(wrap)
    others = [call for name, call in wraps(source)
              if call is not wrap and name == model and source.scope_of(call) is scope]
    if any(source.statement_of(call) is other for call in others):
        return True  # the other wrap itself
    return any(call.lineno > other.lineno
               and _on_every_path_to(source, other, _anchor(source, source.statement_of(call))) for call in others)


def _dropped_parameter(source: Source, scope: ast.AST, name: str) -> bool:
    """`def prepare(net): net.to(device); net = DDP(net, ...)`: the wrapper is lost when the
    function returns, unless it is returned or stored (`self.net = net`, `models.append(net)`)."""
    if not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    arguments = scope.args
    if name not in {a.arg for a in arguments.posonlyargs + arguments.args + arguments.kwonlyargs}:
        return False
    results_dropped = _results_dropped(source, scope)
    for node in ast_walk.walk(scope):
        if isinstance(node, ast.Return) and not results_dropped and node.value is not None and any(
                isinstance(inner, ast.Name) and inner.id == name for inner in ast_walk.walk(node.value)):
            return False
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and any(
                isinstance(inner, ast.Name) and inner.id == name for inner in ast_walk.walk(node.value)) and any(
                not isinstance(target, ast.Name) for target in (
                    node.targets if isinstance(node, ast.Assign) else [node.target])):
            return False
        if isinstance(node, ast.Call) and any(isinstance(argument, ast.Name) and argument.id == name
                                              for argument in node.args) and last_part(node.func) not in WRAPPERS:
            return False  # handed on (to a Trainer, a list's append): it may live on there
    return True


def _results_dropped(source: Source, function: Union[ast.FunctionDef, ast.AsyncFunctionDef]) -> bool:
    """Every call of `function` in the script is a statement of its own (`to_gpu(head)`): what
    it returns is dropped, so returning the wrapper does not hand it to the caller."""
    calls = [call for call in source.calls if isinstance(call.func, ast.Name) and call.func.id == function.name]
    return bool(calls) and source.functions.get(function.name) == [function] and all(
        isinstance(source.parents.get(call), ast.Expr) for call in calls)


def _loop_bound(source: Source, statement: ast.stmt, name: str) -> bool:
    """Whether a for loop or a comprehension of the wrap's scope binds `name`, and no plain
    assignment other than the wrap does."""
    scope = source.scope_of(statement)
    # (Every node of the script, not a walk of the scope: a walk costs more than the list.)
    loops = [node for node in source.nodes if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension))
             and source.scope_of(node) is scope and name in _names_in(node.target)]
    assigned = any(other is not statement and not isinstance(other, (ast.For, ast.AsyncFor))
                   and name in assigned_targets(other) for other in source.statements_in(scope))
    return bool(loops) and not assigned


def _names_in(target: ast.AST) -> set[str]:
    return {node.id for node in ast_walk.walk(target) if isinstance(node, ast.Name)}


def _anchor(source: Source, statement: ast.stmt) -> ast.stmt:
    """ddpify's `if distributed:` around the wrap is part of the wrap."""
    parent = source.parents.get(statement)
    if isinstance(parent, ast.If) and not parent.orelse and statement in parent.body:
        return parent
    return statement


def _places(source: Source, statement: ast.stmt, model: str) -> bool:
    """Whether the statement (itself, not a nested block) assigns or moves `model`."""
    if model in assigned_targets(statement) and not isinstance(statement, (ast.For, ast.AsyncFor)):
        return True
    return model in source.moved_by(statement)


def _derived_from_wrapped(source: Source, statement: ast.stmt, wrapped: Sequence[str]) -> bool:
    """`model = torch.compile(model)` after the wrap builds on the wrapped model; a move
    (`model = model.to(device)`) does not count as that."""
    value = statement.value if isinstance(statement, (ast.Assign, ast.AnnAssign)) else None
    if value is None or any(isinstance(node, ast.Call) and source.move_receiver(node) for node in ast_walk.walk(value)):
        return False
    return any(dotted(node) in wrapped for node in ast_walk.walk(value))


def _on_every_path_to(source: Source, statement: ast.stmt, anchor: ast.stmt) -> bool:
    """Whether the statement and the wrap lie on one path: not in two parts of one compound
    statement (the `if` and `else` of a fresh and a resumed model)."""
    statement_chain = [statement, *source.ancestors(statement)]
    anchor_chain = [anchor, *source.ancestors(anchor)]
    common = next(node for node in statement_chain if node in anchor_chain)
    if common is statement or common is anchor:
        return True  # one holds the other: `with ... as model:` around the wrap
    # The nodes just below the common ancestor on each side: two statements of one block are
    # fine (one runs before the other); two parts of one statement (body, orelse) are not.
    statement_side = statement_chain[statement_chain.index(common) - 1]
    anchor_side = anchor_chain[anchor_chain.index(common) - 1]
    return not (isinstance(common, ast.stmt) and not _same_block(common, statement_side, anchor_side))


def _same_block(compound: ast.stmt, first: ast.AST, second: ast.AST) -> bool:
    for field in ("body", "orelse", "finalbody", "handlers"):
        block = getattr(compound, field, None)
        if isinstance(block, list) and first in block:
            return second in block
    return False


def _training_uses(source: Source, scope, names: Sequence[str], through_calls: bool) -> list[ast.Call]:
    """Calls of the model inside a loop that calls `.backward()`, and (`through_calls`) calls
    of the file's own functions that take the model (`train(model, loader)`), which may train it."""
    calls = source.calls_in(scope)
    backward_loops = {id(loop) for call in calls if last_part(call.func) == "backward"
                      for loop in source.ancestors(call) if isinstance(loop, LOOPS)}
    uses = [call for call in calls if dotted(call.func) in names
            and any(id(loop) in backward_loops for loop in source.ancestors(call))]
    for call in calls if through_calls else []:
        if last_part(call.func) in source.functions and any(
                dotted(argument) in names for argument in [*call.args, *(k.value for k in call.keywords)]):
            uses.append(call)
    return uses


# Exporters that compile or serialise the module they are handed: given the DDP wrapper,
# `torch.jit.script` fails on DDP's forward, `torch.onnx.export` and `torch.jit.trace` record
# the wrapper (its `module.` names, its hooks), and a file made on rank 0 no longer loads into
# the bare model.
# Calls that write what they are handed to a file.
SAVES = frozenset({"save", "save_file", "save_checkpoint"})
EXPORTERS = frozenset({"torch.jit.script", "torch.jit.trace", "torch.jit.trace_module", "torch.onnx.export",
                       "torch.onnx.dynamo_export", "torch.export.export"})


def wrapper_handed_to_an_exporter(migrated: Source) -> Iterator[Finding]:
    """Rule: `torch.jit.script(model)`, `torch.jit.trace(model, x)`, `torch.onnx.export(model,
    ...)` after `model = DDP(model, ...)` in the same function (or both at module level) hand
    the exporter the wrapper: it must be given the bare model (`getattr(model, "module",
    model)`, `model.module`)."""
    wrapped: dict[tuple[int, str], int] = {}  # (scope, name) -> the line of its first wrap
    for name, call in wraps(migrated):
        if last_part(call.func) not in DDP_WRAPPERS:
            continue  # (FSDP2's fully_shard keeps the module itself)
        key = (id(migrated.scope_of(call)), name)
        wrapped[key] = min(wrapped.get(key, call.lineno), call.lineno)
    if not wrapped:
        return
    _follow_into_callees(migrated, wrapped)
    for call in migrated.calls:
        if not call.args or migrated.qualified(call.func) not in EXPORTERS:
            continue
        handed = dotted(call.args[0])
        line = wrapped.get((id(migrated.scope_of(call)), handed or ""))
        if handed is not None and line is not None and line < call.lineno:
            yield ("DDP922", call.lineno, f"`{ast.unparse(call.func)}({handed}, ...)` is handed the DDP wrapper "
                   f"made at output line {line}")
    yield from _wrapper_state_saved(migrated, wrapped)
    yield from _wrapper_itself_saved(migrated, wrapped)


def _wrapper_state_saved(migrated: Source, wrapped: dict[tuple[int, str], int]) -> Iterator[Finding]:
    """Rule: `model.state_dict()` after `model = DDP(model, ...)` in the same scope, in a
    statement that saves (`torch.save(model.state_dict(), path)`) or that fills a value a save
    of that scope writes (`checkpoint = {"model": model.state_dict()}`): the file holds the
    wrapper's `module.`-prefixed keys, which the bare model does not load. An in-memory copy
    loaded back into the same wrapper (`best = model.state_dict()`) is consistent and not
    counted, nor is a name unwrapped again after the wrap, nor the other arm of a test (`if
    isinstance(model, DDP)`, `if distributed`)."""
    saves = [call for call in migrated.calls if last_part(call.func) in SAVES]
    for call in migrated.calls:
        if not (isinstance(call.func, ast.Attribute) and call.func.attr == "state_dict"):
            continue
        handed = dotted(call.func.value)
        scope = migrated.scope_of(call)
        line = wrapped.get((id(scope), handed or ""))
        if handed is None or line is None or line >= call.lineno:
            continue
        statement = migrated.statement_of(call)
        if _rebound_between(migrated, scope, handed, line, call.lineno) or _in_an_else(migrated, call):
            continue  # `model = getattr(model, "module", model)`; `m.module... if isinstance(m, DDP) else m...`
        filled = {name.split(".")[0] for name in assigned_targets(statement)}
        filled |= {name for target in getattr(statement, "targets", [])
                   if isinstance(target, ast.Subscript) and (name := dotted(target.value)) is not None}
        filled |= _derived_names(migrated, scope, statement, filled)
        if any(save.lineno >= statement.lineno and migrated.scope_of(save) is scope and (
                migrated.statement_of(save) is statement or any(
                    isinstance(node, ast.Name) and node.id in filled for node in ast_walk.walk(save)))
               for save in saves):
            yield ("DDP922", call.lineno, f"`{handed}.state_dict()` is saved from the DDP wrapper made at output "
                   f"line {line}: its keys carry `module.`")


def _wrapper_itself_saved(migrated: Source, wrapped: dict[tuple[int, str], int]) -> Iterator[Finding]:
    """Rule: the wrapper itself after `net = DDP(net, ...)` in the same scope, in what a save of
    that scope writes: `torch.save(net, path)`, `state = {'net': net.module if use_cuda else net}`
    then `torch.save(state, path)`. The file pickles DistributedDataParallel (its process group,
    its hooks), which loads nowhere without a group. A read through `getattr(net, "module", net)`
    is the module; an arm under a test of the wrapper (`isinstance`, `hasattr`, `distributed`)
    is where the script already told the two apart; a name bound again after the wrap is not
    the wrapper."""
    for save in migrated.calls:
        if migrated.qualified(save.func) != "torch.save" or not save.args:
            continue  # (a helper of the user's handed the wrapper: _follow_into_callees)
        scope = migrated.scope_of(save)
        names = {name: line for (scope_id, name), line in wrapped.items()
                 if scope_id == id(scope) and "." not in name and line < save.lineno}
        if not names:
            continue
        held = {node.id for node in ast_walk.walk(save.args[0]) if isinstance(node, ast.Name)
                and _stored_in(migrated, node, save.args[0])} - set(names)
        writers = [save.args[0], *(statement.value for statement in migrated.statements_in(scope)
                                   if isinstance(statement, ast.Assign) and statement.lineno < save.lineno
                                   and {name.split(".")[0] for name in assigned_targets(statement)} & held)]
        for writer in writers:
            if _under_a_test_of_the_wrapper(migrated, writer, scope):
                continue  # `if isinstance(net, DDP): ... else: state = {"net": net}`
            for node in ast_walk.walk(writer):
                if isinstance(node, ast.Name) and node.id in names and names[node.id] < node.lineno \
                        and _stored_in(migrated, node, writer) \
                        and not _rebound_between(migrated, scope, node.id, names[node.id], node.lineno):
                    yield ("DDP922", node.lineno, f"`{node.id}`, the DDP wrapper made at output line "
                           f"{names[node.id]}, is saved itself: the file pickles the wrapper, not the module")


def _stored_in(source: Source, node: ast.Name, value: ast.AST) -> bool:
    """The name's value itself is part of what `value` builds: `value` is the name, or holds it
    as a dict value, a list or tuple item, or an arm of a conditional (`{'net': net}`, `net.module
    if use_cuda else net`), an arm not under a test of the wrapper (`isinstance`, `hasattr`,
    `distributed`). Not `net.state_dict()` (DDP922's other rule), not `getattr(net, "module",
    net)` nor `fit(net)`: what a call returns is not the wrapper."""
    child: ast.AST = node
    for ancestor in source.ancestors(node):
        if child is value:
            return True
        if isinstance(ancestor, ast.IfExp) and child is not ancestor.test:
            if _tests_the_wrapper(ast.unparse(ancestor.test)):
                return False
        elif not (isinstance(ancestor, ast.Dict) and child in ancestor.values
                  or isinstance(ancestor, (ast.List, ast.Tuple)) and child in ancestor.elts):
            return False
        child = ancestor
    return child is value


def _under_a_test_of_the_wrapper(source: Source, node: ast.AST, scope) -> bool:
    """An `if` (or conditional) of the scope around `node` tests the wrapper."""
    for ancestor in source.ancestors(node):
        if ancestor is scope:
            return False
        if isinstance(ancestor, (ast.If, ast.IfExp)) and _tests_the_wrapper(ast.unparse(ancestor.test)):
            return True
    return False


def _tests_the_wrapper(test: str) -> bool:
    return any(word in test for word in ("isinstance(", "hasattr(", "distributed", "DDP", "world_size"))


def _derived_names(source: Source, scope, statement: ast.stmt, filled: set[str]) -> set[str]:
    """Names later assignments of the scope build from `filled` (`state = model.state_dict()`, then
    `cpu_state = {k: v.cpu() for k, v in state.items()}`), to a fixed point."""
    later = sorted((other for other in source.statements_in(scope) if isinstance(other, (ast.Assign, ast.AnnAssign))
                    and other.lineno > statement.lineno and other.value is not None), key=attrgetter("lineno"))
    derived: set[str] = set()
    changed = True
    while changed:
        changed = False
        for other in later:
            if other.value is not None and any(isinstance(node, ast.Name) and node.id in filled | derived
                                               for node in ast_walk.walk(other.value)):
                new = {name.split(".")[0] for name in assigned_targets(other)} - filled - derived
                if new:
                    derived |= new
                    changed = True
    return derived


def _follow_into_callees(source: Source, wrapped: dict[tuple[int, str], int]) -> None:
    """Rule: the wrapper handed on after the wrap is the wrapper where it lands: a parameter of
    the file's own function or method it is passed to (`train(model, ...)`, `Trainer(model)`,
    `save_checkpoint(model, path)`), from that function's first line, and an attribute of `self`
    an `__init__` stores it in (`self.model = model`), in every other method of that class.
    Followed to a fixed point (a call chain); a function defined more than once is not followed."""
    scopes = {id(scope): scope for scope in [source.tree, *(f for fs in source.functions.values() for f in fs)]}
    pending = list(wrapped.items())
    while pending:
        (scope_id, name), line = pending.pop()
        scope = scopes.get(scope_id)
        if scope is None:
            continue
        found = [landing for call in source.calls_in(scope)
                 if call.lineno > line and not _in_an_else(source, call)
                 for landing in _parameters_handed(source, call, name)]
        found += _stored_on_self(source, scope, name, line)
        for key, start in found:
            if key not in wrapped:
                wrapped[key] = start
                pending.append((key, start))


def _parameters_handed(source: Source, call: ast.Call, name: str) -> list[tuple[tuple[int, str], int]]:
    """The parameters of the file's one function `call` calls that receive `name`."""
    functions = source.functions.get(last_part(call.func) or "", []) or _called_instance(source, call)
    if len(functions) != 1:
        return []
    function = functions[0]
    if not isinstance(function, FUNCTIONS):
        return []
    parameters = [argument.arg for argument in function.args.posonlyargs + function.args.args]
    if isinstance(source.parents.get(function), ast.ClassDef) and parameters \
            and not any(dotted(decorator) == "staticmethod" for decorator in function.decorator_list):
        parameters = parameters[1:]  # `self`, `cls`
    landed = []
    for index, argument in enumerate(call.args):
        if isinstance(argument, ast.Starred):
            break
        if dotted(argument) == name and index < len(parameters):
            landed.append(parameters[index])
    landed += [keyword.arg for keyword in call.keywords if keyword.arg is not None and dotted(keyword.value) == name]
    return [((id(function), parameter), function.lineno) for parameter in landed]


def _called_instance(source: Source, call: ast.Call) -> list[Scope]:
    """`stopper(loss, model)` where `stopper = EarlyStopping(...)`, a class of the file: its
    `__call__` (the instance bound by one assignment only)."""
    called = dotted(call.func)
    bound = [assignment.value for assignment in source.assignments
             if called is not None and called in assigned_targets(assignment)]
    if len(bound) != 1 or not isinstance(bound[0], ast.Call):
        return []
    classes = [node for node in source.functions.get(last_part(bound[0].func) or "", [])
               if isinstance(source.parents.get(node), ast.ClassDef)]
    if len(classes) != 1:
        return []
    owner = source.parents[classes[0]]
    return [method for method in owner.body  # type: ignore[attr-defined]
            if isinstance(method, FUNCTIONS) and method.name == "__call__"]


def _stored_on_self(source: Source, scope: Scope, name: str, line: int) -> list[tuple[tuple[int, str], int]]:
    """`self.model = model` (or `self.model = DDP(self.model)`) in an `__init__`: every other
    method of its class sees the wrapper in `self.model`."""
    owner = source.parents.get(scope)
    if not (isinstance(scope, FUNCTIONS) and scope.name == "__init__" and isinstance(owner, ast.ClassDef)):
        return []
    attributes = {name} if name.startswith("self.") else set()
    for statement in source.statements_in(scope):
        if isinstance(statement, ast.Assign) and statement.lineno > line and dotted(statement.value) == name:
            attributes.update(target for target in assigned_targets(statement) if target.startswith("self."))
    found = [((id(scope), attribute), line) for attribute in attributes if attribute != name]
    return found + [((id(method), attribute), method.lineno) for attribute in attributes
                    for method in owner.body if isinstance(method, FUNCTIONS) and method is not scope]


def _rebound_between(source: Source, scope, name: str, start: int, end: int) -> bool:
    """A statement of `scope` between the two lines (both excluded) binds `name`."""
    lines = source.binding_lines(scope, name)
    first_after = bisect_right(lines, start)
    return first_after < len(lines) and lines[first_after] < end


def _in_an_else(source: Source, node: ast.AST) -> bool:
    child = node
    for ancestor in source.ancestors(node):
        if isinstance(ancestor, ast.IfExp) and child is ancestor.orelse or \
                isinstance(ancestor, ast.If) and child in ancestor.orelse:
            return True
        child = ancestor
    return False


def wraps_across_methods(migrated: Source) -> Iterator[Finding]:
    """DDP927: a wrap of `self.x` in one method that another method of the object undoes.

    A wrap of an attribute must come after every move of it and on every path that builds
    it, across the methods of its object too: `build_model()` wraps `self.G`, and
    `__init__` calls `self.build_model()` and then moves `self.G` (`if self.use_cuda:
    self.G.cuda()`, or a loop over `self.nets`, which holds it): DDP registered a CPU
    module. Or the wrap sits in one branch (`else: self.model = Net().to(device)`) while
    the other builds the model anew through a method (`if args.resume: self.load(path)`,
    whose body assigns `self.model`): the resumed model trains unwrapped."""
    for model, call in wraps(migrated):
        method = migrated.scope_of(call)
        owner = migrated.parents.get(method)
        if not model.startswith("self.") or not isinstance(method, FUNCTIONS) or not isinstance(owner, ast.ClassDef):
            continue
        methods = [other for other in owner.body if isinstance(other, FUNCTIONS)]
        problem = _moved_after_by_a_caller(migrated, model, method, methods, owner) or \
            _built_anew_by_a_method_off_the_wraps_path(migrated, model, call, methods)
        if problem is not None:
            yield "DDP927", call.lineno, problem


def _moved_after_by_a_caller(source: Source, model: str, method: Scope, methods: Sequence[Scope],
                             owner: ast.ClassDef) -> Optional[str]:
    """A method that calls the wrap's method, then moves the model (itself, or by a loop over
    an attribute of the object that holds it)."""
    holders = _containers_holding(owner, model)
    name = getattr(method, "name", "")
    for caller in methods:
        if caller is method:
            continue
        called = [call.lineno for call in source.calls_in(caller) if dotted(call.func) == f"self.{name}"]
        if not called:
            continue
        for statement in source.statements_in(caller):
            if statement.lineno <= min(called):
                continue
            looped = isinstance(statement, (ast.For, ast.AsyncFor)) and _iterates_one_of(statement.iter, holders) \
                and any(source.moved_by(inner) for inner in ast_walk.statements(statement))
            if model in source.moved_by(statement) or looped:
                return (f"`{model}` is wrapped in `{name}()`, but `{getattr(caller, 'name', '')}()` calls it and then "
                        f"moves `{model}` (output line {statement.lineno}): move the wrap below that move")
    return None


def _containers_holding(owner: ast.ClassDef, model: str) -> set[str]:
    """`self.nets` for `self.nets = {"G": self.G, ...}` (or a list, a tuple) in a method."""
    found: set[str] = set()
    for node in ast_walk.walk(owner):
        if isinstance(node, ast.Assign) and isinstance(node.value, (ast.Dict, ast.List, ast.Tuple)):
            elements = node.value.values if isinstance(node.value, ast.Dict) else node.value.elts
            if any(dotted(element) == model for element in elements):
                found.update(name for target in node.targets if (name := dotted(target)) is not None)
    return found


def _iterates_one_of(iterated: ast.expr, containers: set[str]) -> bool:
    """`self.nets`, `self.nets.values()`, `self.nets.items()`."""
    if isinstance(iterated, ast.Call) and isinstance(iterated.func, ast.Attribute) and not iterated.args:
        iterated = iterated.func.value
    return dotted(iterated) in containers


def _built_anew_by_a_method_off_the_wraps_path(source: Source, model: str, wrap: ast.Call,
                                               methods: Sequence[Scope]) -> Optional[str]:
    """A call `self.load(...)` in the wrap's method, on a path that does not reach the wrap,
    of a method whose body assigns the model."""
    scope = source.scope_of(wrap)
    anchor = _anchor(source, source.statement_of(wrap))
    binders = {method.name for method in methods if isinstance(method, FUNCTIONS) and method is not scope
               and any(model in assigned_targets(statement) for statement in source.statements_in(method))}
    for call in source.calls_in(scope):
        callee = dotted(call.func) or ""
        if not callee.startswith("self.") or callee[len("self."):] not in binders:
            continue
        statement = source.statement_of(call)
        if not _on_every_path_to(source, statement, anchor) and not _wrapped_again_on_its_path(
                source, model, wrap, statement):
            return (f"the wrap of `{model}` sits in one branch: output line {statement.lineno} builds it anew "
                    f"through `{callee}()` on a path that does not reach the wrap")
    return None


# What a DDP wrapper answers itself: nn.Module's own attributes and DDP's. Any other attribute
# of the model (`model.hyperparams`, `model.seen`, `model.n_classes`) raises AttributeError on
# the wrapper: `getattr(model, "module", model).hyperparams` reads it on both paths.
WRAPPER_OWN = frozenset({
    "add_module", "apply", "bfloat16", "buffers", "children", "compile", "cpu", "cuda", "double", "eval",
    "extra_repr", "float", "forward", "get_buffer", "get_extra_state", "get_parameter", "get_submodule", "half",
    "ipu", "load_state_dict", "modules", "mtia", "named_buffers", "named_children", "named_modules",
    "named_parameters", "parameters", "register_backward_hook", "register_buffer", "register_forward_hook",
    "register_forward_pre_hook", "register_full_backward_hook", "register_full_backward_pre_hook",
    "register_load_state_dict_post_hook", "register_load_state_dict_pre_hook", "register_module",
    "register_parameter", "register_state_dict_post_hook", "register_state_dict_pre_hook", "requires_grad_",
    "set_extra_state", "set_submodule", "share_memory", "state_dict", "to", "to_empty", "train", "training",
    "type", "xpu", "zero_grad", "dump_patches", "call_super_init",
    # DistributedDataParallel's own
    "module", "device_ids", "output_device", "dim", "broadcast_buffers", "find_unused_parameters",
    "static_graph", "process_group", "no_sync", "join", "join_hook", "join_device", "join_process_group",
    "register_comm_hook", "gradient_as_bucket_view", "require_backward_grad_sync", "require_forward_param_sync",
    "reducer", "logger", "device_type", "bucket_bytes_cap", "device", "parameters_to_ignore",
})


def attributes_read_through_the_wrapper(migrated: Source) -> Iterator[Finding]:
    """`model = DDP(model, ...)`, then `model.hyperparams["subdivisions"]` in the same scope:
    the wrapper has no such attribute (AttributeError on every rank under torchrun, while plain
    python, where nothing is wrapped, runs). Read after the wrap, with `model` not bound again
    in between; a private attribute (`model._x`) is left to its author."""
    for name, call in wraps(migrated):
        statement = migrated.statement_of(call)
        if last_part(call.func) not in DDP_WRAPPERS or "." in name or not (
                isinstance(statement, ast.Assign) and any(dotted(target) == name for target in statement.targets)):
            continue
        scope = migrated.scope_of(call)
        # (Walked within the scope: a nested function's reads are its own scope's.)
        nodes = [node for node in ast_walk.walk(scope) if migrated.scope_of(node) is scope]
        rebound = [node.lineno for node in nodes if node is not statement
                   and isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For))
                   and name in assigned_targets(node)]
        for node in nodes:
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == name \
                    and node.lineno > (statement.end_lineno or statement.lineno) and not node.attr.startswith("_") \
                    and node.attr not in WRAPPER_OWN \
                    and not any(statement.lineno < line <= node.lineno for line in rebound):
                yield ("DDP925", node.lineno, f"`{name}.{node.attr}` reads the DDP wrapper made at output line "
                                              f"{call.lineno}, which has no `{node.attr}`: read "
                                              f"`getattr({name}, \"module\", {name}).{node.attr}`")
                break


def parts_run_beside_the_wrapper(migrated: Source) -> Iterator[Finding]:
    """`model = DDP(model, ...)`, then a part of the raw module run with gradients on, in a
    step whose backward it reaches: `getattr(model, "module", model).aux_fc(x)` (or
    `model.module.heads[0](x)`, an alias, a loop over them) in the wrap's scope, or in a
    function of the file the wrapper is handed to there, whose return that backward reaches.
    DDP shares gradients only inside the wrapper's forward (analysis/part_runs.py)."""
    functions = {function.name: function for function in ast_walk.statements(migrated.tree)
                 if isinstance(function, FUNCTIONS)}
    frozen = frozen_parts(migrated.tree)  # a momentum teacher the class freezes trains nothing
    for name, call in wraps(migrated):
        if last_part(call.func) not in DDP_WRAPPERS or "." in name:
            continue
        scope = migrated.scope_of(call)
        needed = _fed_to_backward(migrated, scope)
        if not needed[0]:
            continue
        after = [run for run in [*part_runs(scope, f"{name}.module", frozen), *_raw_module_runs(migrated, scope, name)]
                 if run.lineno > call.lineno]
        for run in after:
            if _feeds(migrated, run, scope, needed):
                yield ("DDP926", run.lineno, f"`{ast.unparse(run.func)}(...)` runs a part of the module "
                                             f"`{name}` wraps (output line {call.lineno}) outside the "
                                             f"wrapper's forward, and the step's backward reaches it")
                return
        for handed in migrated.calls_in(scope):
            callee = functions.get(handed.func.id) if isinstance(handed.func, ast.Name) else None
            if callee is None or handed.lineno <= call.lineno or not _feeds(migrated, handed, scope, needed):
                continue
            parameters = [argument.arg for argument in callee.args.args]
            for index, argument in enumerate(handed.args[:len(parameters)]):
                if dotted(argument) != name:
                    continue
                runs = part_runs(callee, f"{parameters[index]}.module", frozen)
                returned = _fed_to_backward(migrated, callee, returns=True)
                inner = next((run for run in runs if _feeds(migrated, run, callee, returned)), None)
                if inner is not None:
                    yield ("DDP926", inner.lineno, f"`{ast.unparse(inner.func)}(...)` runs a part of the module "
                                                 f"`{name}` wraps (output line {call.lineno}) outside the "
                                                 f"wrapper's forward, in `{callee.name}`, whose result the "
                                                 f"step's backward reaches (output line {handed.lineno})")
                    return


def _raw_module_runs(source: Source, scope: Scope, name: str) -> list[ast.Call]:
    """`getattr(model, "module", model)(x)`, `model.module(x)`: the whole raw module run, with
    gradients on, in the scope (not under no_grad: those are evaluations)."""
    return [call for call in source.calls_in(scope) if dotted_or_module(call.func) == f"{name}.module"
            and not any(isinstance(ancestor, ast.With) and "no_grad" in ast.unparse(ancestor.items[0].context_expr)
                        for ancestor in source.ancestors(call))]


def _fed_to_backward(source: Source, scope: Scope, returns: bool = False) -> tuple[list[ast.AST], set[str]]:
    """What the scope's backward (or, with `returns`, what it returns) is computed from: the
    expressions, and the names read by them and by the assignments to those names, in turn."""
    roots: list[ast.AST] = []
    for statement in source.statements_in(scope):
        if returns and isinstance(statement, ast.Return) and statement.value is not None:
            roots.append(statement.value)
    if not returns:
        roots = [call.func.value for call in source.calls_in(scope)
                 if isinstance(call.func, ast.Attribute) and call.func.attr == "backward"]
    needed = {node.id for root in roots for node in ast_walk.walk(root) if isinstance(node, ast.Name)}
    assignments = [statement for statement in source.statements_in(scope)
                   if isinstance(statement, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and statement.value is not None]
    changed = True
    while changed:
        changed = False
        for statement in assignments:
            if set(assigned_targets(statement)) & needed and statement.value not in roots:
                roots.append(cast(ast.AST, statement.value))
                needed |= {node.id for node in ast_walk.walk(cast(ast.AST, statement.value))
                           if isinstance(node, ast.Name)}
                changed = True
    return roots, needed


def _feeds(source: Source, node: ast.AST, scope: Scope, fed: tuple[list[ast.AST], set[str]]) -> bool:
    roots = {id(root) for root in fed[0]}
    return any(id(ancestor) in roots for ancestor in (node, *source.ancestors(node)))
def requires_grad_changed_after_the_wrap(migrated: Source) -> Iterator[Finding]:
    """DDP928: requires_grad of a wrapped model changed after its wrap, in the wrap's scope.

    DDP registers, when it is built, the parameters that require grad. A part frozen after the
    wrap leaves its reducer waiting for gradients that never come ("Expected to have finished
    reduction in the prior iteration", on the next step); a part unfrozen after it trains with
    gradients no rank shares, and the copies drift apart without an error. The whole model
    toggled (a GAN's discriminator frozen for the generator's step, then unfrozen) is safe,
    but the whole model frozen for good after its wrap trains nothing: the wrap should not be
    there (DDP refuses such a module when it is built frozen). The migration's own report of
    a part changed after the wrap (DDP111) is counted by the caller."""
    for model, call in wraps(migrated):
        statement = migrated.statement_of(call)
        if last_part(call.func) not in DDP_WRAPPERS or "." in model and not model.startswith("self."):
            continue
        scope = migrated.scope_of(call)
        names = set(assigned_targets(statement) or [model])
        later = sorted((other for other in migrated.statements_in(scope)
                        if other.lineno > (statement.end_lineno or statement.lineno)), key=attrgetter("lineno"))
        changes = []
        for other in later:
            for name in names:
                if _rebound_between(migrated, scope, name, statement.lineno, other.lineno):
                    continue  # a new model under the old name
                change = _requires_grad_change(migrated, other, name)
                if change is not None:
                    changes.append((name, *change))
        for name, whole, value, line in changes:
            if not whole:
                yield ("DDP928", line, f"requires_grad of part of `{name}` changed on output line {line}, after "
                       f"its wrap on output line {call.lineno}: DDP syncs only the parameters that required grad "
                       "when it was built")
                break
            if value is False and all(other_value is False for other_name, _, other_value, _ in changes
                                      if other_name == name) and not _trained_then_run_without_gradients(
                    migrated, scope, name, call.lineno, line):
                yield ("DDP928", line, f"`{name}` is frozen for good on output line {line}, after its wrap on "
                       f"output line {call.lineno}: it trains nothing, so it needs no wrap")
                break


def _trained_then_run_without_gradients(source: Source, scope: Scope, name: str, wrap_line: int,
                                        frozen_line: int) -> bool:
    """A model trained after its wrap (called in a loop that calls backward) and only then frozen
    for good, and run after that only under no_grad or inference_mode (a pretrained encoder
    probed in a second stage): the wrap served its training, and a forward without gradients
    asks nothing of DDP's reducer."""
    calls = [call for call in source.calls_in(scope) if dotted(call.func) == name]
    trained = any(wrap_line < call.lineno < frozen_line and any(
        isinstance(node, LOOPS) and calls_named(node, ("backward",)) for node in source.ancestors(call))
        for call in calls)
    return trained and all(_without_gradients(source, call) for call in calls if call.lineno > frozen_line)


def _without_gradients(source: Source, node: ast.AST) -> bool:
    return any(isinstance(ancestor, (ast.With, ast.AsyncWith)) and any(
        isinstance(item.context_expr, ast.Call) and last_part(item.context_expr.func) in ("no_grad", "inference_mode")
        for item in ancestor.items) for ancestor in source.ancestors(node))


def _requires_grad_change(source: Source, statement: ast.stmt,
                          model: str) -> Optional[tuple[bool, Optional[bool], int]]:
    """(whole, value, the line that sets it) where the statement itself sets requires_grad of `model` or of a part of
    it (`model.requires_grad_(False)`, `getattr(model, "module", model)[0].requires_grad_(False)`,
    `for p in model.module.head.parameters(): p.requires_grad = True`, `freeze(model)` with a
    function of this file that does so to its parameter); value None where it is computed."""
    if isinstance(statement, (ast.For, ast.AsyncFor)):
        over = statement.iter
        if isinstance(over, ast.Call) and isinstance(over.func, ast.Attribute) \
                and over.func.attr in ("parameters", "named_parameters"):
            part = _part_of(over.func.value, model)
            setting = _set_on_each(statement)
            if part is not None and setting is not None:
                return part == "", setting[0], setting[1]
        return None
    call = statement.value if isinstance(statement, ast.Expr) else None
    if not isinstance(call, ast.Call):
        return None
    if isinstance(call.func, ast.Attribute) and call.func.attr == "requires_grad_":
        part = _part_of(call.func.value, model)
        return None if part is None else (part == "", _flag(call, True), statement.lineno)
    return _changed_by_a_helper(source, call, model) if isinstance(call.func, ast.Name) else None


def _changed_by_a_helper(source: Source, call: ast.Call, model: str) -> Optional[tuple[bool, Optional[bool], int]]:
    """`freeze(model)`: a function of this file (not a method) that changes requires_grad of
    the parameter it is handed `model` (or a part of it) in."""
    assert isinstance(call.func, ast.Name)
    for function in source.functions.get(call.func.id, ()):
        if not isinstance(function, FUNCTIONS) or isinstance(source.parents.get(function), ast.ClassDef):
            continue
        parameters = [argument.arg for argument in function.args.args]
        for position, argument in enumerate(call.args[:len(parameters)]):
            part = _part_of(argument, model)
            if part is None:
                continue
            for inner in function.body:
                changed = _requires_grad_change(source, inner, parameters[position])
                if changed is not None:
                    return part == "" and changed[0], changed[1], call.lineno
    return None


def _set_on_each(loop: Union[ast.For, ast.AsyncFor]) -> Optional[tuple[Optional[bool], int]]:
    """The value a loop over parameters gives `requires_grad` (`p.requires_grad = False`,
    `p.requires_grad_(False)`: a bool, None where it is computed) and the line that gives it;
    None where it gives none."""
    for node in ast_walk.walk(loop):
        if isinstance(node, ast.Assign) and any(isinstance(target, ast.Attribute) and target.attr == "requires_grad"
                                                for target in node.targets):
            return (bool(node.value.value) if isinstance(node.value, ast.Constant) else None), node.lineno
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "requires_grad_" \
                and isinstance(node.func.value, ast.Name) and node.func.value.id in _names_in(loop.target):
            return _flag(node, True), node.lineno
    return None


def _flag(call: ast.Call, default: bool) -> Optional[bool]:
    """The constant handed to `requires_grad_(...)`, its default without one, None if computed."""
    values = [*call.args, *(keyword.value for keyword in call.keywords)]
    if not values:
        return default
    return bool(values[0].value) if isinstance(values[0], ast.Constant) else None


def _part_of(node: ast.expr, model: str) -> Optional[str]:
    """"" where `node` is `model` itself (or its `.module`, `getattr(model, "module", model)`,
    `model.eval()`), the rest of the path for a part of it (`model.module.head`, `model[0]`,
    `getattr(model, "module", model).head`), else None."""
    path: list[str] = []
    while not isinstance(node, ast.Name):
        if isinstance(node, ast.Subscript):
            path.insert(0, "[]")
            node = node.value
        elif isinstance(node, ast.Attribute):
            path.insert(0, "." + node.attr)
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("eval", "train", "requires_grad_", "to", "cuda", "float"):
            node = node.func.value
        elif isinstance(node, ast.Call) and dotted(node.func) == "getattr" and len(node.args) > 1 \
                and isinstance(node.args[1], ast.Constant) and node.args[1].value == "module":
            node = node.args[0]
        else:
            return None
    name = node.id + "".join(path)
    for whole in (model + ".module", model):
        if name == whole:
            return ""
        if name.startswith((whole + ".", whole + "[")):
            return name[len(whole):]
    return None


# Initialisers of torch.nn.init that draw from the global generator, and the methods that do
# so in place (`m.weight.normal_(0, 0.02)`, a layer's `m.reset_parameters()`).
RANDOM_INITS = frozenset({"normal_", "uniform_", "kaiming_normal_", "kaiming_uniform_", "xavier_normal_",
                          "xavier_uniform_", "trunc_normal_", "orthogonal_", "sparse_"})
RANDOM_FILLS = frozenset({"normal_", "uniform_", "random_", "bernoulli_", "exponential_", "cauchy_",
                          "log_normal_", "geometric_", "reset_parameters"})


def weights_drawn_after_the_wrap(migrated: Source) -> Iterator[Finding]:
    """DDP929: weights of a wrapped model drawn afresh after its wrap, in the wrap's scope.

    DDP broadcasts rank 0's parameters when it is built; from then on it only averages the
    gradients. A random initialisation after the wrap (`for m in model.modules():
    nn.init.kaiming_normal_(m.weight)`, `model.fc.weight.normal_(0, 0.01)`, `model.apply(init)`
    with a function of the file that draws) gives each rank other weights, and the same
    averaged steps applied to different weights never bring them together: rank 0 saves its
    own model, with no error anywhere."""
    for model, call in wraps(migrated):
        statement = migrated.statement_of(call)
        if last_part(call.func) not in DDP_WRAPPERS:
            continue
        scope = migrated.scope_of(call)
        name = (assigned_targets(statement) or [model])[0]
        end = statement.end_lineno or statement.lineno
        for other in sorted(migrated.statements_in(scope), key=attrgetter("lineno")):
            if other.lineno <= end or _rebound_between(migrated, scope, name, statement.lineno, other.lineno):
                continue
            draw = _draw_into(migrated, other, name)
            if draw is not None:
                yield ("DDP929", other.lineno, f"`{draw}` draws weights of `{name}` on output line {other.lineno}, "
                       f"after its wrap on output line {call.lineno}: each rank draws its own, and DDP never "
                       "brings them together; draw them before the wrap")
                break


def _draw_into(source: Source, statement: ast.stmt, model: str) -> Optional[str]:
    """The call by which the statement itself draws weights of `model` at random, or None."""
    if isinstance(statement, (ast.For, ast.AsyncFor)):
        over = statement.iter
        if isinstance(over, ast.Call) and isinstance(over.func, ast.Attribute) and over.func.attr in (
                "modules", "children", "named_modules", "named_children", "parameters", "named_parameters") \
                and _part_of(over.func.value, model) is not None:
            looped = _names_in(statement.target)
            for node in ast_walk.walk(statement):
                if isinstance(node, ast.Call) and _draws(source, node) and any(
                        isinstance(inner, ast.Name) and inner.id in looped for inner in ast_walk.walk(node)):
                    return ast.unparse(node)
        return None
    call = statement.value if isinstance(statement, ast.Expr) else None
    if not isinstance(call, ast.Call):
        return None
    if _draws(source, call):
        drawn = (call.args[0] if call.args else None) if _initialiser(source, call) \
            else cast(ast.Attribute, call.func).value
        if drawn is not None and _part_of(drawn, model) is not None:
            return ast.unparse(call)
    if isinstance(call.func, ast.Attribute) and call.func.attr == "apply" and call.args \
            and _part_of(call.func.value, model) is not None:
        drawing = source.functions.get(dotted(call.args[0]) or "", ())
    elif isinstance(call.func, ast.Name) and any(_part_of(argument, model) is not None for argument in call.args):
        drawing = source.functions.get(call.func.id, ())  # `init_weights(model)`
    else:
        return None
    for function in drawing:
        if any(isinstance(node, ast.Call) and _draws(source, node) for node in ast_walk.walk(function)):
            return ast.unparse(call)
    return None


def _draws(source: Source, call: ast.Call) -> bool:
    """`nn.init.normal_(...)` (a random initialiser) or `tensor.normal_(...)`."""
    if _initialiser(source, call):
        return last_part(call.func) in RANDOM_INITS
    return isinstance(call.func, ast.Attribute) and call.func.attr in RANDOM_FILLS \
        and dotted(call.func.value) not in ("torch", "np", "numpy", "random")


def _initialiser(source: Source, call: ast.Call) -> bool:
    """A function of torch.nn.init (`nn.init.normal_`, `init.normal_` after `from torch.nn import init`)."""
    return (source.qualified(call.func) or "").startswith(("torch.nn.init.", "nn.init.", "init."))
