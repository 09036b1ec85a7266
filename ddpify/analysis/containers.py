"""Models kept in a container: `modules = {"net": Net(), ...}`, its entries moved to the
device (`for k in modules: modules[k] = modules[k].to(device)`), the model taken out by key
(`net = modules["net"]`). The model's own name is never moved, but its value is."""
from typing import Optional

import libcst as cst

from ddpify.analysis.control import Facts
from ddpify.analysis.facts import Model
from ddpify.analysis.nodes import calls_within, dotted_name, find_all


def container_moves(facts: Facts, model: Model) -> list[cst.Call]:
    """The moves of the container's entries (entry_moves) where the model's function takes
    the model out of a container (`net = modules["net"]`): the wrap comes after them, even
    when the model was taken out before them."""
    found: list[cst.Call] = []
    for value in facts.assigned_values.get(model.name, ()):
        container = dotted_name(value.value) if isinstance(value, cst.Subscript) else None
        if container is not None and facts.function_of(value) is model.function:
            found.extend(entry_moves(facts, container, model.function))
    return found


def entry_moves(facts: Facts, container: str, function: Optional[cst.FunctionDef]) -> list[cst.Call]:
    """The `.to()` / `.cuda()` calls of the function that may move the container's entries: the call
    reads the container (`modules[name].to(device)`), or sits in a loop or comprehension
    over it (`for m in modules.values(): m.to(device)`, `{k: v.to(device) for k, v in
    modules.items()}`), or in a statement that stores into it (`modules[name] =
    modules[name].to(device)`). A model taken out of that container afterwards may be on
    the device, so it is not one that "never moved" (which would give it Gloo and a wrap
    without device_ids on a GPU machine)."""
    found: list[cst.Call] = []
    for call in calls_within(function if function is not None else facts.module):
        if not isinstance(call.func, cst.Attribute) or call.func.attr.value not in ("to", "cuda"):
            continue
        if facts.function_of(call) is not function:
            continue
        parts: list[cst.CSTNode] = [call.func.value]
        node = facts.parents.get(call)
        while node is not None and node is not function:
            if isinstance(node, (cst.For, cst.CompFor)):
                parts.append(node.iter)
            elif isinstance(node, cst.Assign):
                parts.extend(target.target for target in node.targets)
            elif isinstance(node, (cst.AugAssign, cst.AnnAssign)):
                parts.append(node.target)
            node = facts.parents.get(node)
        reads: list[cst.BaseExpression] = [
            read for part in parts for kind in (cst.Name, cst.Attribute) for read in find_all(part, kind)]
        if any(dotted_name(read) == container for read in reads):
            found.append(call)
    return found
