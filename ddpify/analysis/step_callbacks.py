"""Rule: a loader during whose pass an optimizer steps is a training loader, also when the step
is a function the pass is handed rather than code written in its loop.

`train(epoch, loader, process_fn)` whose loop only calls `process_fn(batch)`, called as
`train(epoch, trainloader, update_fn)`: the pass trains when some call hands that parameter a
step function, read at the call site:
- a function or method of this file whose body (or a function nested in it) steps or calls
  backward (`train_step`, `trainer.step`, `Stepper(model, opt).step`);
- `functools.partial(train_step, ...)`, or a lambda that calls one;
- a name bound to what a factory returns (`update_fn = make_update(model, optimizer, ...)`):
  a factory of this file whose nested function steps and that returns a callable, one of
  another module of the project that trains, or any other call handed the optimizer (the
  callable it makes steps that optimizer). What a training function of this file returns
  otherwise (the model it trained) is no step.
A shared pass (`run_pass(loader, step)`) called once with a step function and once with an
evaluation one trains only at the first call: the second is an evaluating call (call_modes.py).
"""
from typing import TYPE_CHECKING, Optional

import libcst as cst

from ddpify.analysis.nodes import (
    argument_among,
    calls_within,
    dotted_name,
    find_all,
    parameter_names,
    positional_parameters,
    returns_in,
)

if TYPE_CHECKING:
    from ddpify.analysis.values import ValueFlow as FactRecord

PARTIAL = ("functools.partial", "partial")


def mark_passes_handed_a_step(facts: "FactRecord", training: set[cst.FunctionDef]) -> None:
    """Marks the loops that call a parameter a step function is handed as training loops, and
    their functions as training ones (`training`, which the caller propagates to callers)."""
    stepping = _functions_holding_steps(facts)
    for loops in list(facts.loops_over.values()):
        for loop in loops:
            function = facts.function_of(loop)
            if function is None or loop in facts.loops_calling_training:
                continue
            parameters = parameter_names(function)
            called = {name for call in calls_within(loop.body)
                      if (name := dotted_name(call.func)) in parameters}
            handed = {parameter for parameter in called for call in facts.calls_of(function)
                      if is_step_callable(facts, _handed(call, function, parameter), stepping)}
            if not handed:
                continue
            facts.loops_calling_training.add(loop)
            if function not in training:
                facts.step_parameters.setdefault(function, set()).update(handed)
                training.add(function)


def hands_a_step(facts: "FactRecord", callee: cst.FunctionDef, call: cst.Call) -> bool:
    """The call hands one of the callee's step parameters a step function."""
    stepping = _functions_holding_steps(facts)
    return any(is_step_callable(facts, _handed(call, callee, parameter), stepping)
               for parameter in facts.step_parameters.get(callee, ()))


def _handed(call: cst.Call, function: cst.FunctionDef, parameter: str) -> Optional[cst.BaseExpression]:
    """What the call hands the parameter; a method called on its object (`runner.run_epoch(loader,
    step)`) takes its arguments after `self`."""
    positional = positional_parameters(function)
    if positional[:1] in (["self"], ["cls"]) and isinstance(call.func, cst.Attribute):
        positional = positional[1:]
    return argument_among(call, parameter, positional)


def _functions_holding_steps(facts: "FactRecord") -> set[cst.FunctionDef]:
    """Every function around a step (backward, optimizer.step, a helper module's training call),
    the factories around a nested step function included, and those that call one."""
    holding = set(facts.training_functions)
    for call in [*facts.training_calls, *facts.training_helper_calls]:
        parent = facts.parents.get(call)
        while parent is not None:
            if isinstance(parent, cst.FunctionDef):
                holding.add(parent)
            parent = facts.parents.get(parent)
    return holding


def is_step_callable(facts: "FactRecord", value: Optional[cst.BaseExpression],
                     stepping: set[cst.FunctionDef], depth: int = 0) -> bool:
    """Calling this value takes a training step (see the module's rule)."""
    if value is None or depth > 3:
        return False
    if isinstance(value, cst.Lambda):
        return any(is_step_callable(facts, call.func, stepping, depth + 1) or call in facts.training_calls
                   for call in calls_within(value.body))
    if isinstance(value, cst.Call) and dotted_name(value.func) in PARTIAL and value.args:
        return is_step_callable(facts, value.args[0].value, stepping, depth + 1)
    name = dotted_name(value)
    if name is None:
        if isinstance(value, cst.Attribute):  # `Stepper(model, optimizer).step`
            return _method_steps(facts, value.attr.value, stepping)
        return False
    function = facts.functions.get(name)
    if function is not None:
        return function in stepping
    if isinstance(value, cst.Attribute) and _method_steps(facts, value.attr.value, stepping):
        return True  # `trainer.train_step`, `self.step` of a class of this file
    return any(isinstance(made, cst.Call) and _makes_a_step(facts, made, stepping)
               for made in facts.assigned_values.get(name, ()))


def _method_steps(facts: "FactRecord", method: str, stepping: set[cst.FunctionDef]) -> bool:
    return any(function.name.value == method and facts.class_of(function) is not None
               for function in stepping)


def _makes_a_step(facts: "FactRecord", made: cst.Call, stepping: set[cst.FunctionDef]) -> bool:
    """`make_update(model, optimizer, loss_fn)`: a factory of this file around a step that hands
    back a callable, one of another module of the project that trains, or any other call handed
    the optimizer. A function of this file that trains and hands back what it trained
    (`model_ft = train_model(model_ft, criterion, optimizer, ...)`, then `visualize_model(model_ft)`)
    makes no step: calling the model it returns is a forward pass."""
    factory = facts.functions.get(dotted_name(made.func) or "")
    if factory is not None:
        return factory in stepping and _hands_back_a_callable(facts, factory, stepping)
    if made in facts.training_helper_calls:
        return True
    return any(dotted_name(arg.value) in facts.optimizer_names for arg in made.args)


def _hands_back_a_callable(facts: "FactRecord", factory: cst.FunctionDef, stepping: set[cst.FunctionDef]) -> bool:
    """Some return of the factory is a function: one defined inside it or in the file, a
    lambda, a partial, a stepping method of a class of the file (`return trainer.step`)."""
    nested = {statement.name.value for statement in find_all(factory.body, cst.FunctionDef)}
    returned = [each.value for each in returns_in(factory) if each.value is not None]
    while returned:
        value = returned.pop()
        if isinstance(value, cst.Tuple):
            returned.extend(element.value for element in value.elements)
        elif _is_a_function(facts, value, nested, stepping):
            return True
    return False


def _is_a_function(facts: "FactRecord", value: cst.BaseExpression, nested: set[str],
                   stepping: set[cst.FunctionDef]) -> bool:
    if isinstance(value, cst.Name):
        return value.value in nested or value.value in facts.functions
    if isinstance(value, cst.Attribute):
        return _method_steps(facts, value.attr.value, stepping)
    return isinstance(value, cst.Lambda) or (isinstance(value, cst.Call) and dotted_name(value.func) in PARTIAL)
