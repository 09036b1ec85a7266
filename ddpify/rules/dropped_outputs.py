"""Outputs of the wrapped model that a training step leaves out of its loss (DDP105).

`outputs, aux_outputs = net(x)` with `loss = criterion(outputs, y)`, `validity =
discriminator(fake)[0]` in a GAN's generator step, `preds["logits"]` of a forward that
returns a dict: the parts of the model only the dropped outputs come from get no gradient
in that step, and DDP, which waits for a gradient from every parameter unless told some may
not come, fails at the next step ("Expected to have finished reduction in the prior
iteration"). The model's rule (rules/model.py) asks this module before it writes the wrap.
"""
import re
from collections.abc import Iterator
from typing import Optional

import libcst as cst

from ddpify.analysis import figures
from ddpify.analysis.control import Facts
from ddpify.analysis.facts import Model, OutputKey, OutputParts
from ddpify.analysis.nodes import argument_among, dotted_name, find_all, positional_parameters
from ddpify.emit.edits import Edits


def report_outputs_left_out(facts: Facts, edits: Edits, model: Model, anchor: cst.BaseStatement) -> bool:
    """Rule: when the model's class (of this file or of another module of the project)
    returns several outputs from forward, a call of the model in a training step (a
    function that takes a backward, or a training loop) that keeps only some of them (an
    unpacked name that is `_` or never read again, `model(x)[0]`, only `out["logits"]` of
    the result read), while a submodule feeds only the dropped ones, makes the wrap expect
    unused parameters (DDP105, at that call), unless another call of the model before the
    same backward keeps an output that submodule feeds (StarGAN's discriminator step: the
    class output of the real images trains the class head that the penalty's call drops).
    An output kept in any way ddpify cannot follow (the whole result handed to a criterion,
    a starred target) counts as used. True when one was found."""
    called, outputs = _output_parts(facts, model, anchor)
    if not outputs:
        return False
    backwards = [call for call in facts.training_calls
                 if isinstance(call.func, cst.Attribute) and call.func.attr.value == "backward"]
    trained: dict[tuple[int, int], set[str]] = {}
    left_out: list[tuple[cst.Call, tuple[int, int], list[OutputKey]]] = []
    for call in _training_calls(facts, model):
        kept = _kept_outputs(facts, call, outputs)
        step = _step_of(facts, call, backwards)
        keys = list(outputs) if not kept else [key for key in outputs if key in kept]
        trained.setdefault(step, set()).update(part for key in keys for part in outputs[key])
        if kept:
            left_out.append((call, step, [key for key in outputs if key not in kept]))
    for call, step, dropped in left_out:
        untrained = sorted({part for key in dropped for part in outputs[key]} - trained[step])
        if untrained:
            parts = ", ".join(f"`self.{part}`" for part in untrained)
            left = ", ".join(f"[{key!r}]" for key in dropped)
            forward = f"{called.rsplit('.', 1)[-1]}.forward"
            edits.report("DDP105", call, "submodule unused in forward: DDP told to expect unused parameters: "
                         f"this training step leaves output {left} of `{forward}` out of its loss "
                         "(on every step, or on those a test skips), "
                         f"and {parts}, which only that output comes from, gets no gradient")
            return True
    return False


def _step_of(facts: Facts, call: cst.Call, backwards: list[cst.Call]) -> tuple[int, int]:
    """The backward this call's outputs feed: the first in its function after it (its
    position), or the call's function when none follows there (the backward is elsewhere)."""
    function = facts.function_of(call)
    start = facts.start_of(call)
    following = [facts.start_of(backward) for backward in backwards
                 if facts.function_of(backward) is function and facts.start_of(backward) > start]
    if following:
        return min(following)
    return facts.start_of(function) if function is not None else (0, 0)


def _output_parts(facts: Facts, model: Model, anchor: cst.BaseStatement) -> tuple[str, OutputParts]:
    """The class the model is built from, by its call in a statement that touches the model
    before the wrap (`net = InceptionLike().to(device)`), and its output parts."""
    if not facts.forward_output_parts:
        return "", {}
    sources: list[cst.CSTNode] = []
    for statement in facts.statements_touching.get(model.name, ()):
        if facts.line_of(statement) <= facts.line_of(anchor):
            sources.append(statement)
            sources += _handed_in(facts, model.function, statement)
    for source in sources:
        code = facts.module.code_for_node(source)
        for called, outputs in facts.forward_output_parts.items():
            if re.search(rf"(?<![\w.]){re.escape(called)}\(", code):
                return called, outputs
    return "", {}


def _handed_in(facts: Facts, function: Optional[cst.FunctionDef], statement: cst.CSTNode) -> list[cst.CSTNode]:
    """`self.model = model.to(device)` in a Trainer's __init__, a step's parameter: what the
    calls of the function (of the class, for __init__) in this file hand that parameter
    (`Trainer(Net(), loader)`), and the values a name handed there was assigned (`net =
    Net()`)."""
    if function is None:
        return []
    parameters = set(positional_parameters(function)) | {p.name.value for p in function.params.kwonly_params}
    used = {name.value for name in find_all(statement, cst.Name)} & (parameters - {"self"})
    if not used:
        return []
    owner = facts.class_of(function)
    callee = owner.name.value if owner is not None and function.name.value == "__init__" else function.name.value
    positional = positional_parameters(function)[1:] if owner is not None else positional_parameters(function)
    found: list[cst.CSTNode] = []
    for call in facts.calls_by_callee.get(callee, ()):
        for parameter in used:
            value = argument_among(call, parameter, positional)
            if value is None:
                continue
            found.append(value)
            name = dotted_name(value)
            found += facts.assigned_values.get(name, []) if name is not None else []
    return found


def _training_calls(facts: Facts, model: Model) -> Iterator[cst.Call]:
    """Calls of the model through the wrapper (`net(x)`, `net.forward(x)`, under any name
    that holds it) with gradients on, in a function that takes a backward or in a training
    loop."""
    stepping = {facts.function_of(call) for call in facts.training_calls
                if isinstance(call.func, cst.Attribute) and call.func.attr.value == "backward"}
    for function, name in facts.model_holders(model):
        for call in [*facts.calls_by_callee.get(name, ()), *facts.calls_by_callee.get(f"{name}.forward", ())]:
            if not facts.sees_value(call, name, function) or figures.under_no_grad(facts, call):
                continue
            caller = facts.function_of(call)
            if caller is not None and caller in stepping or facts.training_loop_around(call) is not None:
                yield call


def _kept_outputs(facts: Facts, call: cst.Call, outputs: OutputParts) -> Optional[set[OutputKey]]:
    """The outputs of this call the step goes on to use; None where ddpify cannot tell
    (then every output counts as used)."""
    parent = facts.parents.get(call)
    if isinstance(parent, cst.Subscript) and parent.value is call:
        key = _subscript_key(parent, outputs)
        return None if key is None else {key}
    if not isinstance(parent, cst.Assign) or len(parent.targets) != 1:
        return None
    target = parent.targets[0].target
    scope = _scope(facts, call)
    if isinstance(target, (cst.Tuple, cst.List)):
        if len(target.elements) != len(outputs) or not all(isinstance(key, int) for key in outputs):
            return None
        kept: set[OutputKey] = set()
        for position, element in enumerate(target.elements):
            if isinstance(element, cst.StarredElement):
                return None
            value = element.value
            if not isinstance(value, cst.Name) or value.value != "_" and _reads(facts, scope, value, call):
                kept.add(position)
        return kept
    if isinstance(target, cst.Name):
        keys: set[OutputKey] = set()
        for read in _reads(facts, scope, target, call):
            subscript = facts.parents.get(read)
            key = _subscript_key(subscript, outputs) if isinstance(subscript, cst.Subscript) \
                and subscript.value is read else None
            if key is None:
                return None
            keys.add(key)
        return keys or None
    return None


def _subscript_key(subscript: cst.Subscript, outputs: OutputParts) -> Optional[OutputKey]:
    """`[0]`, `[-1]`, `["logits"]`: the output a subscript picks, when it is one of them."""
    if len(subscript.slice) != 1 or not isinstance(subscript.slice[0].slice, cst.Index):
        return None
    value = subscript.slice[0].slice.value
    key: Optional[OutputKey] = None
    if isinstance(value, cst.Integer):
        key = int(value.value, 0)
    elif isinstance(value, cst.UnaryOperation) and isinstance(value.operator, cst.Minus) \
            and isinstance(value.expression, cst.Integer):
        key = len(outputs) - int(value.expression.value, 0)
    elif isinstance(value, cst.SimpleString) and isinstance(value.evaluated_value, str):
        key = value.evaluated_value
    return key if key in outputs else None


def _scope(facts: Facts, call: cst.Call) -> cst.CSTNode:
    """Where the call's results may be read: its function, or at module level the
    outermost loop around it (the training loop)."""
    function = facts.function_of(call)
    if function is not None:
        return function.body
    outermost: cst.CSTNode = facts.statement_of(call)
    current = facts.parents.get(call)
    while current is not None:
        if isinstance(current, (cst.For, cst.While)):
            outermost = current
        current = facts.parents.get(current)
    return outermost


def _reads(facts: Facts, scope: cst.CSTNode, target: cst.Name, call: cst.Call) -> list[cst.Name]:
    """The other mentions of the name in scope that run whenever the call does: each may
    read it. One under a test the call is not under (`if epoch >= warmup: loss = loss +
    0.4 * criterion(aux, y)`, a log every hundred steps) feeds the loss only on some
    steps, and on the others the output is left out."""
    return [name for name in find_all(scope, cst.Name) if name.value == target.value and name is not target
            and not _under_a_test_the_call_is_not(facts, name, call, scope)]


def _under_a_test_the_call_is_not(facts: Facts, node: cst.CSTNode, call: cst.Call, scope: cst.CSTNode) -> bool:
    around_call = set()
    current = facts.parents.get(call)
    while current is not None and current is not scope:
        around_call.add(id(current))
        current = facts.parents.get(current)
    current = facts.parents.get(node)
    while current is not None and current is not scope:
        if isinstance(current, (cst.If, cst.IfExp, cst.Else)) and id(current) not in around_call:
            return True
        current = facts.parents.get(current)
    return False
