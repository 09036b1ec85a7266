"""The loop trains the wrapper, not a name bound to the raw module before the wrap (DDP948).

`model = net.to(device)` (or `model = torch.compile(net.to(device))`, or plain `model = net`)
then `net = DDP(net)`: `model` still holds the module the wrapper wraps, and a training loop
that calls `model(x)` runs the raw module's forward. No hook of DDP runs, no rank averages a
gradient, and each rank trains its own copy; on CPU and GPU alike the script finishes with no
error. The reading is per scope and conservative: the alias is bound in the wrap's scope on a
line above the wrap, never bound again below it, and called below it inside a loop whose body
calls `backward()`, or handed there to a function of this file that calls `backward()`."""
import ast
from collections.abc import Iterator
from typing import Optional

from ddpify import ast_walk
from ddpify.selfcheck.models import DDP_WRAPPERS, Finding, wraps
from ddpify.selfcheck.source import FUNCTIONS, LOOPS, Scope, Source, dotted, last_part

# What leaves a module the same object (or a view of it that shares its parameters).
_SAME_MODULE_METHODS = frozenset({"to", "cuda", "train", "eval", "requires_grad_", "half", "float", "double",
                                  "bfloat16"})


def aliases_trained_around_the_wrap(source: Source) -> Iterator[Finding]:
    """DDP948: a name bound, above `x = DDP(x)` in its scope, to `x` itself, its move or its
    compiled view, and trained below the wrap without being bound again."""
    backward_functions = {function.name for function in ast_walk.walk(source.tree)
                          if isinstance(function, FUNCTIONS) and _calls_backward(function)}
    for model, call in wraps(source):
        if last_part(call.func) not in DDP_WRAPPERS:
            continue
        wrap = source.statement_of(call)
        scope = source.scope_of(call)
        said: set[str] = set()  # an alias bound in both arms of an `if` is said once
        for alias, bound in _aliases_above(source, scope, model, wrap.lineno):
            if alias in said:
                continue
            if alias.startswith("self."):
                trained = _trained_by_the_class(source, scope, alias, bound, wrap.lineno)
            elif any(line > wrap.lineno for line in source.binding_lines(scope, alias)):
                continue
            else:
                trained = _trained_below(source, scope, alias, wrap.lineno, backward_functions)
            if trained is not None:
                said.add(alias)
                yield ("DDP948", trained.lineno,
                       f"`{alias}` is bound to the raw module of `{model}` on output line {bound} and trained here, "
                       f"but `{model}` is wrapped only after it, on output line {wrap.lineno}: this loop runs "
                       f"outside DDP and no rank averages its gradients")


def wrappers_moved_through_an_alias(source: Source) -> Iterator[Finding]:
    """DDP911: `net = DDP(net)`, then `model = net` and `model.to(device)` before the training:
    the alias is the wrapper, and the move reaches the wrapped module after its wrap (DDP was
    built over the weights where they were; on GPUs the reducer then holds the old storage).
    Only a move above the first loop of the scope that calls backward is read: a move after
    the training (to the CPU, for an export) is another matter."""
    for model, call in wraps(source):
        if last_part(call.func) not in DDP_WRAPPERS:
            continue
        wrap = source.statement_of(call)
        scope = source.scope_of(call)
        training = [node.lineno for node in ast_walk.walk(scope) if isinstance(node, LOOPS) and _calls_backward(node)]
        first_training = min(training, default=None)
        if first_training is None:
            continue
        for statement in source.statements_in(scope):
            if not (wrap.lineno < statement.lineno < first_training and isinstance(statement, ast.Assign)
                    and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name)):
                continue
            alias = statement.targets[0].id
            if alias == model or _module_of(statement.value) != model:
                continue
            move = next((inner for inner in source.calls_in(scope)
                         if statement.lineno < inner.lineno < first_training and isinstance(inner.func, ast.Attribute)
                         and inner.func.attr in ("to", "cuda") and dotted(inner.func.value) == alias), None)
            if move is not None and not any(statement.lineno < line <= move.lineno
                                            for line in source.binding_lines(scope, alias)):
                yield ("DDP911", move.lineno,
                       f"`{alias}` is the wrapper of `{model}` (bound on output line {statement.lineno}, after the "
                       f"wrap on output line {wrap.lineno}) and is moved here: the move reaches the wrapped module "
                       "after its wrap; move the module before the wrap")
                break


def _aliases_above(source: Source, scope: Scope, model: str, wrap_line: int) -> Iterator[tuple[str, int]]:
    for statement in source.statements_in(scope):
        if statement.lineno >= wrap_line or not (isinstance(statement, ast.Assign) and len(statement.targets) == 1):
            continue
        alias = dotted(statement.targets[0])
        if alias is not None and ("." not in alias or alias.startswith("self.")) and alias != model \
                and _module_of(statement.value) == model:
            yield alias, statement.lineno


def _module_of(value: ast.expr) -> Optional[str]:
    """The name `value` holds the same module as: `net`, `net.to(device)`, `torch.compile(net)`,
    `net.cuda() if use_cuda else net`."""
    if isinstance(value, ast.IfExp):
        body, orelse = _module_of(value.body), _module_of(value.orelse)
        return body if body == orelse else None
    while isinstance(value, ast.Call):
        if isinstance(value.func, ast.Attribute) and value.func.attr in _SAME_MODULE_METHODS:
            value = value.func.value
        elif last_part(value.func) == "compile" and value.args:
            value = value.args[0]
        else:
            return None
    return dotted(value)


def _trained_below(source: Source, scope: Scope, alias: str, wrap_line: int,
                   backward_functions: set[str]) -> Optional[ast.Call]:
    for call in source.calls_in(scope):
        if call.lineno <= wrap_line:
            continue
        if dotted(call.func) == alias and any(isinstance(node, LOOPS) and _calls_backward(node)
                                              for node in source.ancestors(call)):
            return call
        if dotted(call.func) in backward_functions and any(dotted(argument) == alias for argument in
                                                           [*call.args, *(k.value for k in call.keywords)]):
            return call
    return None


def _trained_by_the_class(source: Source, scope: Scope, alias: str, bound: int, wrap_line: int) -> Optional[ast.Call]:
    """`self.model = torch.compile(model.to(device))` in `__init__`, `model` wrapped below it:
    `self.model(x)` in a loop that calls backward in any method of the class (in the wrap's
    own method, below the wrap), where nothing else in the class assigns `self.model`."""
    owner = source.parents.get(scope)
    if not isinstance(scope, FUNCTIONS) or not isinstance(owner, ast.ClassDef):
        return None
    methods = [method for method in owner.body if isinstance(method, FUNCTIONS)]
    if any(isinstance(node, ast.stmt) and node.lineno != bound and alias in _assigned_names(node)
           for method in methods for node in ast_walk.walk(method)):
        return None
    for method in methods:
        for call in source.calls_in(method):
            if method is scope and call.lineno <= wrap_line:
                continue
            if dotted(call.func) == alias and any(isinstance(node, LOOPS) and _calls_backward(node)
                                                  for node in source.ancestors(call)):
                return call
    return None


def _assigned_names(node: ast.AST) -> list[Optional[str]]:
    if isinstance(node, ast.Assign):
        return [dotted(target) for target in node.targets]
    if isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        return [dotted(node.target)]
    return []


def _calls_backward(node: ast.AST) -> bool:
    return any(isinstance(inner, ast.Call) and last_part(inner.func) == "backward" for inner in ast_walk.walk(node))
