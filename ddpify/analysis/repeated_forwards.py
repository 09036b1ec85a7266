"""Forwards of one model that a training step runs more than once before its backward.

A GAN's discriminator scores the real and the fake batch (`D(real)`, `D(fake.detach())`)
and takes one backward of the sum. Under DDP with `broadcast_buffers=True` (the default)
each forward first copies rank 0's buffers into the module in place; on CUDA, cuDNN's
BatchNorm keeps its running statistics for the backward, so the second forward's copy
bumps their version and the backward fails ("one of the variables needed for gradient
computation has been modified by an inplace operation"). Gloo on the CPU does not show it.
"""
from typing import Optional

import libcst as cst

from ddpify.analysis.control import Facts
from ddpify.analysis.facts import Model
from ddpify.analysis.figures import under_no_grad
from ddpify.analysis.nodes import calls_within, dotted_name

_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)


def holds_batchnorm(facts: Facts, model: Model) -> bool:
    """Whether the model may hold a BatchNorm layer: one is built in what the model's name is
    assigned (`nn.Sequential(..., nn.BatchNorm1d(32))`) or in a class of this file that value
    builds, directly or through its parts' classes. Unknown (a class of another module): as
    soon as the file builds BatchNorm at all."""
    if not facts.batchnorm_calls:
        return False
    values = facts.assigned_values.get(model.name, ())
    scopes: list[cst.CSTNode] = list(values)
    seen: set[str] = set()
    index = 0
    while index < len(scopes):
        for call in calls_within(scopes[index]):
            name = dotted_name(call.func)
            if name in facts.classes and name not in seen:
                seen.add(name)
                scopes.append(facts.classes[name])
        index += 1
    if not values or not any(isinstance(value, cst.Call) and (dotted_name(value.func) in facts.classes or any(
            call in facts.batchnorm_calls for call in calls_within(value))) for value in values):
        return True
    batchnorm = {id(call) for call in facts.batchnorm_calls}
    return any(id(call) in batchnorm for scope in scopes for call in calls_within(scope))


def forward_run_twice_before_a_backward(facts: Facts, holders: set[str]) -> Optional[cst.Call]:
    """A call through the wrapper (one of `holders`) with gradients on that is a second
    forward of the same training step: the second of two calls in the body of one training
    loop (counted in the innermost training loop around each), or a call that repeats
    inside it (in a comprehension or a loop of its own). None when every step runs the
    model once, or where a backward runs between the two forwards (each with its own)."""
    calls = [call for holder in holders for callee in (holder, f"{holder}.forward")
             for call in facts.calls_by_callee.get(callee, ()) if not under_no_grad(facts, call)]
    by_loop: dict[cst.For, list[cst.Call]] = {}
    for call in sorted(calls, key=facts.start_of):
        training = next((loop for loop in facts.enclosing_loops(call) if loop in facts.training_loops), None)
        if training is None:
            continue
        if _repeats_within(facts, call, training):
            return call
        by_loop.setdefault(training, []).append(call)
    seconds = [later for training, found in by_loop.items() for index, later in enumerate(found)
               if any(not _exclusive(facts, earlier, later, loop) and not _backward_between(facts, earlier, later,
                                                                                              training)
                      for earlier in found[:index] for loop in facts.enclosing_loops(later)[:1])]
    return min(seconds, key=facts.start_of) if seconds else None


def _backward_between(facts: Facts, earlier: cst.Call, later: cst.Call, loop: cst.For) -> bool:
    """A `.backward()` of the training loop runs after the first forward and before the
    second (`errD_real.backward()` between `netD(real)` and `netD(fake.detach())`, each
    forward with its own backward, as pytorch/examples' DCGAN does): the first forward's
    saved buffers are spent before the second forward's broadcast overwrites them."""
    start, end = facts.start_of(earlier), facts.start_of(later)
    return any(isinstance(call.func, cst.Attribute) and call.func.attr.value == "backward"
               and start < facts.start_of(call) < end for call in calls_within(loop.body))


def _exclusive(facts: Facts, one: cst.Call, other: cst.Call, loop: cst.For) -> bool:
    """The two calls sit in different branches of one `if` (or conditional expression) in
    the loop: a step runs one of them, never both."""
    branches = _branches(facts, one, loop)
    return any(branches.get(test) not in (None, side) for test, side in _branches(facts, other, loop).items())


def _branches(facts: Facts, node: cst.CSTNode, loop: cst.For) -> dict[cst.CSTNode, str]:
    """Each `if` between the node and the loop, with the side of it the node is on."""
    sides: dict[cst.CSTNode, str] = {}
    child: cst.CSTNode = node
    parent = facts.parents.get(node)
    while parent is not None and parent is not loop:
        if isinstance(parent, (cst.If, cst.IfExp)):
            if child is parent.body:
                sides[parent] = "body"
            elif child is parent.orelse:
                sides[parent] = "orelse"
        child, parent = parent, facts.parents.get(parent)
    return sides


def _repeats_within(facts: Facts, call: cst.Call, loop: cst.For) -> bool:
    """The call sits in a comprehension or in a loop of its own inside the loop's body."""
    child: cst.CSTNode = call
    parent = facts.parents.get(call)
    while parent is not None and parent is not loop:
        if isinstance(parent, _COMPREHENSIONS) or isinstance(parent, (cst.For, cst.While)) and child is parent.body:
            return True
        child, parent = parent, facts.parents.get(parent)
    return False
