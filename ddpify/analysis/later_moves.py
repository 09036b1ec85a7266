"""Moves of a model kept on `self` that another method of its object makes once the model's
own method has built it: `self.build_model()`, then `if self.use_cuda: self.G.cuda()` in
`__init__`; or `self.model.to(self.device)` at the top of `train()` for a model `__init__`
built. Where such a move is, the model reaches its device, and the wrap (and the setup that
the wrap needs) follows it."""
from typing import Optional, cast

import libcst as cst

from ddpify.analysis.containers import entry_moves
from ddpify.analysis.control import Facts
from ddpify.analysis.facts import Model
from ddpify.analysis.nodes import dotted_name


def moves_after_the_build(facts: Facts, model: Model) -> list[cst.Call]:
    """The device moves of the model (or of a container of the object holding it: `for net
    in self.nets.values(): net.cuda()`) in another method of its class that runs after the
    model's own method has built it (_runs_after_the_build)."""
    function = model.function
    owner = facts.class_of(function)
    if function is None or owner is None or not model.name.startswith("self."):
        return []
    found: list[cst.Call] = []
    for call in [*facts.device_moves.get(model.name, ()), *entry_moves_of_containers_holding(facts, model, owner)]:
        method = facts.function_of(call)
        if method is None or method is function or facts.class_of(method) is not owner \
                or not isinstance(method.body, cst.IndentedBlock):
            continue
        if _runs_after_the_build(facts, function, method, call):
            found.append(call)
    return found


def caller_moving_after_the_build(facts: Facts, model: Model) -> Optional[cst.FunctionDef]:
    """The one method that calls the model's method and then moves the model
    (`self.build_model()`, then `self.G.cuda()`): where the model reaches its device."""
    methods = {facts.function_of(call) for call in moves_after_the_build(facts, model)}
    if len(methods) != 1:
        return None
    method = methods.pop()
    if method is None or not any(facts.function_of(call) is method for call in facts.calls_of(model.function)):
        return None
    return method


def _runs_after_the_build(facts: Facts, built_in: cst.FunctionDef, method: cst.FunctionDef, move: cst.Call) -> bool:
    """`method` moves the model after `built_in` has built it: it calls `built_in` before the
    move; or `built_in` is `__init__` (or a method `__init__` calls) and `method`, called
    once and not in a loop, trains, with the move outside its loops, before the training."""
    if any(facts.function_of(call) is method and facts.start_of(call) < facts.start_of(move)
           for call in facts.calls_of(built_in)):
        return True
    built_by_init = built_in.name.value == "__init__" or any(
        cast(cst.FunctionDef, facts.function_of(call)).name.value == "__init__"
        for call in facts.calls_of(built_in) if facts.function_of(call) is not None)
    if not built_by_init or method.name.value == "__init__" or in_loop_below(facts, move, method):
        return False
    # Run once: a wrap in a method run per epoch (`train_epoch()`) would wrap the wrapper.
    calls = facts.calls_of(method)
    if len(calls) != 1 or facts.enclosing_loops(calls[0]):
        return False
    training = facts.first_training_call_in(method)
    return training is not None and facts.start_of(move) < facts.start_of(training)


def in_loop_below(facts: Facts, node: cst.CSTNode, top: cst.CSTNode) -> bool:
    """Does a for or while loop between `node` and `top` hold `node`?"""
    parent = facts.parents.get(node)
    while parent is not None and parent is not top:
        if isinstance(parent, (cst.For, cst.While)):
            return True
        parent = facts.parents.get(parent)
    return False


def entry_moves_of_containers_holding(facts: Facts, model: Model, owner: Optional[cst.ClassDef]) -> list[cst.Call]:
    """`self.nets = {"G": self.G, "D": self.D}` (or a list, a tuple), then `for net in
    self.nets.values(): net.cuda()` in a method of the class: the moves of the container's
    entries, which move the model."""
    if owner is None or not model.name.startswith("self.") or not isinstance(owner.body, cst.IndentedBlock):
        return []
    methods = [statement for statement in owner.body.body if isinstance(statement, cst.FunctionDef)]
    found: list[cst.Call] = []
    for container, values in facts.assigned_values.items():
        if not container.startswith("self.") or container == model.name or not any(
                isinstance(value, (cst.Dict, cst.List, cst.Tuple)) and any(
                    isinstance(element, (cst.DictElement, cst.Element)) and dotted_name(element.value) == model.name
                    for element in value.elements)
                for value in values):
            continue
        for method in methods:
            found.extend(entry_moves(facts, container, method))
    return found
