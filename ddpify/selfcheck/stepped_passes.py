"""The self-check's own reading of which loaders are trained on: a loader during whose pass an
optimizer steps, visible in the file, is a training loader, whatever the migration called it.

Rule (conservative, stdlib `ast` only): a pass over a loader steps when a `for` loop over it
(by its name, through `enumerate`/`tqdm`/`zip` around it; in the function that builds it, or in
a function of this file it is handed to, or through a function returning it in a tuple) holds,
outside any `if` (or `try`, `while`) of its body:
- `.step()` on an optimizer (a name bound to a call given `.parameters()`, or named so), or
  `scaler.step(optimizer)` (not backward() alone: FGSM takes the gradient of its inputs);
- a call of a function of this file that does (a step function called per batch);
- a call of a parameter of its function, to which the call handing the loader hands a step
  function: one of this file, `functools.partial` of one, a lambda calling one, a method of a
  class of this file that steps, or a name bound to a call handed the optimizer (`update =
  make_update(model, optimizer)`: the callable it makes steps that optimizer).
A loop whose step sits under an `if` (`run_epoch(model, val_loader)` with `if training:
optimizer.step()`, `if phase == "train":`) is not read as stepping: which passes train there is
the migration's to tell (call_modes.py, phase loops), and this check does not second-guess it.
"""
import ast
from collections.abc import Iterator
from typing import Optional

from ddpify import ast_walk
from ddpify.selfcheck.source import FUNCTIONS, Source, dotted, last_part, parameter_names

Function = ast.FunctionDef | ast.AsyncFunctionDef
PARTIAL = ("functools.partial", "partial")


def loader_pass_steps(source: Source, loader: ast.Call) -> bool:
    """Some pass over the loader built by this call steps an optimizer (see the module's rule)."""
    reading = _StepReading(source)
    for function, name, call in _holders(source, loader):
        if any(reading.loop_steps(loop, function, call) for loop in _loops_over(source, function, name)):
            return True
        if any(reading.loop_steps(loop, function, None) for loop in _loops_drawing_with_next(source, function, name)):
            return True
    return False


def _loops_drawing_with_next(source: Source, function: Optional[Function], name: str) -> Iterator[ast.AST]:
    """Rule: `batches = iter(loader)`, `itertools.cycle(loader)` or a generator of this file
    handed the loader (`def endless(dl): while True: for b in dl: yield b`), then a `for` or
    `while` step loop of the same function taking `next(batches)`: that loop's steps are
    steps of a pass over the loader, as a `for` over it would be."""
    scope = function if function is not None else source.tree
    generators = {node.name for node in source.tree.body if isinstance(node, FUNCTIONS)
                  and any(isinstance(each, (ast.Yield, ast.YieldFrom)) for each in ast_walk.walk(node))}
    iterators = {target for node in source.assignments if isinstance(node, ast.Assign)
                 and isinstance(node.value, ast.Call) and _function_of(source, node) is function
                 and last_part(node.value.func) in {"iter", "cycle", *generators}
                 and any(dotted(arg) == name for arg in node.value.args) for target in _targets(node)}
    if not iterators:
        return
    # The loops around next(), from the innermost out (a step loop around a micro-batch loop),
    # up to one that also holds a loop of its own: an epoch loop around an evaluation's `for _
    # in range(k): next(batches)` and a training pass over another loader is no step loop of it.
    loops = (ast.For, ast.AsyncFor, ast.While)
    for call in ast_walk.walk(scope):
        if not (isinstance(call, ast.Call) and dotted(call.func) == "next" and call.args
                and dotted(call.args[0]) in iterators):
            continue
        chain: list[ast.AST] = []
        for each in source.ancestors(call):
            if isinstance(each, FUNCTIONS):
                break
            if not isinstance(each, loops) or _function_of(source, each) is not function:
                continue
            if chain and any(isinstance(inner, loops) and inner is not each and inner not in chain
                             for inner in ast_walk.walk(each)):
                break
            yield each
            chain.append(each)


class _StepReading:
    def __init__(self, source: Source) -> None:
        self.source = source
        self.definitions: dict[str, Function] = {}
        for node in source.nodes:
            if isinstance(node, FUNCTIONS):
                self.definitions.setdefault(node.name, node)
        self.optimizers = {name for node in source.assignments for name in _targets(node)
                           if isinstance(node.value, ast.Call) and _given_parameters(node.value)}

    def loop_steps(self, loop: ast.AST, function: Optional[Function], handing: Optional[ast.Call]) -> bool:
        parameters = parameter_names(function) if function is not None else set()
        for node in ast_walk.walk(loop):
            if not isinstance(node, ast.Call) or self._under_a_test(node, loop):
                continue
            if self.steps_here(node, 0):
                return True
            called = dotted(node.func)
            if handing is not None and function is not None and called in parameters \
                    and self.is_step_callable(_handed(handing, function, called), 0):
                return True
        return False

    def steps_here(self, call: ast.Call, depth: int) -> bool:
        """`optimizer.step()`, or a call of a function of this file that steps. (Not backward()
        alone: an FGSM evaluation takes the gradient of its inputs and steps nothing.)"""
        if isinstance(call.func, ast.Attribute) and call.func.attr == "step" and any(
                self._is_optimizer(each) for each in [call.func.value, *call.args]):
            return True  # `optimizer.step()`, `scaler.step(optimizer)`
        called = last_part(call.func) if isinstance(call.func, (ast.Name, ast.Attribute)) else None
        function = self.definitions.get(called or "")
        return function is not None and depth < 3 and self.function_steps(function, depth + 1)

    def _is_optimizer(self, value: ast.AST) -> bool:
        name = dotted(value) or ""
        return name in self.optimizers or "optim" in name.rsplit(".", 1)[-1].lower()

    def function_steps(self, function: ast.AST, depth: int) -> bool:
        """The function's body, nested functions included, steps outside any `if` (a factory of a
        step closure too; `if train: optimizer.step()` depends on the call)."""
        return any(isinstance(node, ast.Call) and not self._under_a_test(node, function)
                   and self.steps_here(node, depth) for node in ast_walk.walk(function))

    def is_step_callable(self, value: Optional[ast.AST], depth: int) -> bool:
        if value is None or depth > 3:
            return False
        if isinstance(value, ast.Lambda):
            return any(isinstance(node, ast.Call) and self.steps_here(node, depth) for node in ast_walk.walk(value))
        if isinstance(value, ast.Call) and dotted(value.func) in PARTIAL and value.args:
            return self.is_step_callable(value.args[0], depth + 1)
        if isinstance(value, ast.Attribute):  # `stepper.step`, `Stepper(model, opt).step`
            method = self.definitions.get(value.attr)
            return method is not None and self.function_steps(method, depth + 1)
        if isinstance(value, ast.Name):
            function = self.definitions.get(value.id)
            if function is not None:
                return self.function_steps(function, depth + 1)
            return any(self._makes_a_step(made, depth) for made in _bound_values(self.source, value.id))
        return False

    def _makes_a_step(self, made: ast.AST, depth: int) -> bool:
        """`make_update(model, optimizer)`: a factory of this file that steps, or a call handed the optimizer."""
        if not isinstance(made, ast.Call):
            return False
        factory = self.definitions.get(last_part(made.func) or "") if isinstance(made.func, ast.Name) else None
        if factory is not None and self.function_steps(factory, depth + 1):
            return True
        return any(dotted(arg) in self.optimizers for arg in [*made.args, *(k.value for k in made.keywords)])

    def _under_a_test(self, node: ast.AST, loop: ast.AST) -> bool:
        """Inside an `if` of the loop's body: `if training:`, `if phase == "train":` may skip it
        on this pass, which the migration decides (call_modes.py, phase loops)."""
        for ancestor in self.source.ancestors(node):
            if ancestor is loop:
                return False
            if isinstance(ancestor, (ast.If, ast.IfExp, ast.While, ast.Try, ast.BoolOp)):
                return True
        return False


def _holders(source: Source, loader: ast.Call) -> Iterator[tuple[Optional[Function], str, Optional[ast.Call]]]:
    """(function, name, the call that handed it there) for the loader's name where it is built,
    the parameter of each function of this file it is handed to, and the names a caller unpacks
    it into from a returned tuple."""
    statement = source.statement_of(loader)
    if not isinstance(statement, ast.Assign) or statement.value is not loader:
        return  # (an entry of a dict of loaders: the name holds the dict, not this loader)
    built_in = _function_of(source, statement)
    held: list[tuple[Optional[Function], str, Optional[ast.Call]]] = [
        (built_in, name, None) for name in _targets(statement)]
    held.extend(_unpacked_from_returns(source, built_in, {name for _, name, _ in held}))
    seen: set[tuple[int, str]] = set()
    while held:
        function, name, handing = held.pop()
        if (id(function), name) in seen or len(seen) > 20:
            continue
        seen.add((id(function), name))
        yield function, name, handing
        for call in source.calls:
            callee = _definition(source, call)
            if callee is None or _function_of(source, call) is not function:
                continue
            for parameter in _parameters_given(call, callee, name):
                held.append((callee, parameter, call))


def _unpacked_from_returns(source: Source, function: Optional[Function], names: set[str]
                           ) -> Iterator[tuple[Optional[Function], str, Optional[ast.Call]]]:
    """`return train_loader, val_loader`, then `tl, vl = make_loaders(...)` in the caller."""
    if function is None:
        return
    positions = {index for node in ast_walk.walk(function) if isinstance(node, ast.Return)
                 and isinstance(node.value, ast.Tuple)
                 for index, element in enumerate(node.value.elts) if dotted(element) in names}
    for node in source.assignments:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and last_part(
                node.value.func) == function.name and isinstance(node.targets[0], ast.Tuple):
            for index in positions:
                element = node.targets[0].elts[index] if index < len(node.targets[0].elts) else None
                if isinstance(element, ast.Name):
                    yield _function_of(source, node), element.id, None


COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


def _loops_over(source: Source, function: Optional[Function], name: str) -> Iterator[ast.AST]:
    """`for` loops over the name, and passes written in one expression: a comprehension over it
    (`[train_step(x, y) for x, y in loader]`), read whole, and `map(step, loader)`, read as a
    call of `step` per batch."""
    scope = function if function is not None else source.tree
    for node in ast_walk.walk(scope):
        if isinstance(node, (ast.For, ast.AsyncFor)):
            iterated = [node.iter]
        elif isinstance(node, COMPREHENSIONS):
            iterated = [each.iter for each in node.generators]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "map":
            iterated = node.args[1:]
        else:
            continue
        if any(name in _names(each) for each in iterated) and _function_of(source, node) is function:
            # (map's function is read as called once per batch.)
            yield ast.Call(func=node.args[0], args=[], keywords=[]) if isinstance(node, ast.Call) else node


def _definition(source: Source, call: ast.Call) -> Optional[Function]:
    """A top-level function of the file by its name, or the one method of the file's classes so
    named (`runner.run_epoch(loader, step)`)."""
    if isinstance(call.func, ast.Name):
        return next((node for node in source.tree.body
                     if isinstance(node, FUNCTIONS) and node.name == call.func.id), None)
    if isinstance(call.func, ast.Attribute):
        methods = [node for owner in source.tree.body if isinstance(owner, ast.ClassDef)
                   for node in owner.body if isinstance(node, FUNCTIONS) and node.name == call.func.attr]
        return methods[0] if len(methods) == 1 else None
    return None


def _positional(call: ast.Call, callee: Function) -> list[str]:
    """The parameters the call fills by position: after `self` for a method called on its object."""
    positional = [arg.arg for arg in [*callee.args.posonlyargs, *callee.args.args]]
    if positional[:1] in (["self"], ["cls"]) and isinstance(call.func, ast.Attribute):
        return positional[1:]
    return positional


def _parameters_given(call: ast.Call, callee: Function, name: str) -> list[str]:
    positional = _positional(call, callee)
    given = [positional[index] for index, arg in enumerate(call.args)
             if index < len(positional) and isinstance(arg, ast.Name) and arg.id == name]
    given += [keyword.arg for keyword in call.keywords
              if keyword.arg is not None and isinstance(keyword.value, ast.Name) and keyword.value.id == name]
    return given


def _handed(call: ast.Call, callee: Function, parameter: str) -> Optional[ast.AST]:
    for keyword in call.keywords:
        if keyword.arg == parameter:
            return keyword.value
    positional = _positional(call, callee)
    index = positional.index(parameter) if parameter in positional else None
    if index is not None and index < len(call.args) and not isinstance(call.args[index], ast.Starred):
        return call.args[index]
    return None


def _function_of(source: Source, node: ast.AST) -> Optional[Function]:
    return next((ancestor for ancestor in source.ancestors(node) if isinstance(ancestor, FUNCTIONS)), None)


def _targets(statement: ast.AST) -> list[str]:
    targets = statement.targets if isinstance(statement, ast.Assign) else [getattr(statement, "target", None)]
    return [name for name in map(dotted, targets) if name is not None]


def _bound_values(source: Source, name: str) -> list[ast.AST]:
    return [node.value for node in source.assignments if node.value is not None and name in _targets(node)]


def _given_parameters(call: ast.Call) -> bool:
    """`SGD(model.parameters(), lr=...)`, `RAdam(net.parameters())`: an optimizer's construction."""
    return bool(call.args) and isinstance(call.args[0], ast.Call) and isinstance(call.args[0].func, ast.Attribute) \
        and call.args[0].func.attr == "parameters"


def _names(node: ast.AST) -> set[str]:
    return {each.id for each in ast_walk.walk(node) if isinstance(each, ast.Name)}
