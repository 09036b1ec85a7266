"""Models kept in a container: `modules = {"net": Net(), ...}`, its entries moved to the
device (`for k in modules: modules[k] = modules[k].to(device)`), the model taken out by key
(`net = modules["net"]`). The model's own name is never moved, but its value is."""
from collections.abc import Callable, Mapping, Sequence
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


def iterated_elements(parents: Mapping[cst.CSTNode, cst.CSTNode], node: cst.CSTNode, name: str,
                      parameters: Optional[list[str]] = None,
                      named: Optional[Callable[[str, cst.CSTNode], Optional[cst.BaseExpression]]] = None
                      ) -> list[str]:
    """The names a loop variable stands for in turn where `node` reads it: `G` and `D` for
    `m` in `for m in (G, D): m.to(device)`, `[m.cuda() for m in [enc, dec]]` or
    `map(lambda m: m.to(device), (G, D))`. A move of the variable is a move of each of them:
    the models reach their device there, so the wrap comes after the loop (and takes the
    GPU's device_ids), never before it. Only a literal tuple or list of plain names or
    attributes is followed; `parameters` (the enclosing function's positional parameters)
    turns a loop over one of them into `#N`, its position (`def to_gpu(models): return
    [m.cuda() for m in models]`), which the callers resolve; `named` gives the one literal
    a plain name is bound to (`nets = [G, D]`) before the loop (`parent`), if any."""
    child, parent = node, parents.get(node)
    while parent is not None and not isinstance(parent, (cst.FunctionDef, cst.ClassDef, cst.Module)):
        iterated: Optional[cst.BaseExpression] = None
        if isinstance(parent, cst.For) and child is not parent.iter and _binds(parent.target, name):
            iterated = parent.iter
        elif isinstance(parent, (cst.ListComp, cst.SetComp, cst.GeneratorExp)) and _binds(parent.for_in.target, name):
            iterated = parent.for_in.iter
        elif isinstance(parent, cst.Lambda) and [param.name.value for param in parent.params.params] == [name]:
            call = parents.get(parents.get(parent) or parent)
            if isinstance(call, cst.Call) and dotted_name(call.func) == "map" and len(call.args) == 2 \
                    and call.args[0].value is parent:
                iterated = call.args[1].value
            else:
                return []
        if iterated is not None:
            # `nets = [G, D]` then `for m in nets:`: the list the name holds.
            held = named(iterated.value, parent) if named is not None and isinstance(iterated, cst.Name) else None
            return literal_elements(held if held is not None else iterated, parameters)
        child, parent = parent, parents.get(parent)
    return []


def gathered_elements(parents: Mapping[cst.CSTNode, cst.CSTNode], loop: cst.CSTNode, name: str) -> Optional[list[str]]:
    """The names a list holds when `loop` runs, where the statements before it build it from
    plain names: `nets = []`, `nets.append(G)`, `nets += [D]`, `nets.extend([E])` (G, D, E).
    Only the statements that surely ran before the loop, in the blocks around it, are read;
    None where the list is not built that way (no literal bound, an element that is not a
    plain name, another change of the list, or one under an `if` or in a loop before it):
    then no element is known to be moved there."""
    elements: Optional[list[str]] = None
    for statement in _statements_before(parents, loop):
        small = statement.body if isinstance(statement, cst.SimpleStatementLine) else None
        if small is None:
            if any(read.value == name for read in find_all(statement, cst.Name)):
                return None  # changed under a condition or in a loop, perhaps
            continue
        for part in small:
            step = _list_step(part, name)
            if step is None or (step is not _UNTOUCHED and step[0] == "add" and elements is None):
                return None
            if step is not _UNTOUCHED:
                elements = list(step[1]) if step[0] == "bind" else [*(elements or []), *step[1]]
    return elements


def _statements_before(parents: Mapping[cst.CSTNode, cst.CSTNode], loop: cst.CSTNode) -> list[cst.CSTNode]:
    """The statements that surely ran before `loop` in its function (or module), in order:
    those before it in its block and in each block around it, up to the function, without
    the functions and classes defined there."""
    blocks: list[tuple[Sequence[cst.CSTNode], cst.CSTNode]] = []
    child, parent = loop, parents.get(loop)
    while parent is not None:
        body = getattr(parent, "body", None)
        if isinstance(parent, (cst.IndentedBlock, cst.Module)) and isinstance(body, Sequence) and child in body:
            blocks.append((body, child))
        if isinstance(parent, (cst.FunctionDef, cst.ClassDef, cst.Module, cst.Lambda)):
            break
        child, parent = parent, parents.get(parent)
    found: list[cst.CSTNode] = []
    for body, inner in reversed(blocks):
        for statement in body:
            if statement is inner:
                break
            if not isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
                found.append(statement)
    return found


_UNTOUCHED: tuple[str, list[str]] = ("untouched", [])


def _list_step(statement: cst.BaseSmallStatement, name: str) -> Optional[tuple[str, list[str]]]:
    """("bind", names) for `name = [G, D]`, ("add", names) for `name.append(G)`, `name += [G]`
    or `name.extend([G])`; _UNTOUCHED where the statement does not name the list; None where it
    changes it otherwise or adds something other than plain names."""
    if not any(read.value == name for read in find_all(statement, cst.Name)):
        return _UNTOUCHED

    def names_of(value: cst.BaseExpression) -> Optional[list[str]]:
        if not isinstance(value, (cst.Tuple, cst.List)) or any(
                isinstance(element, cst.StarredElement) for element in value.elements):
            return None
        found = [dotted_name(element.value) for element in value.elements]
        return [element for element in found if element is not None] if all(found) else None

    if isinstance(statement, cst.Assign) and len(statement.targets) == 1 \
            and isinstance(statement.targets[0].target, cst.Name) and statement.targets[0].target.value == name:
        held = names_of(statement.value)
        return ("bind", held) if held is not None else None
    if isinstance(statement, cst.AugAssign) and isinstance(statement.target, cst.Name) \
            and statement.target.value == name and isinstance(statement.operator, cst.AddAssign):
        added = names_of(statement.value)
        return ("add", added) if added is not None else None
    call = statement.value if isinstance(statement, cst.Expr) else None
    if isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Name) \
            and call.func.value.value == name and len(call.args) == 1 and call.args[0].keyword is None \
            and not call.args[0].star:
        if call.func.attr.value == "append":
            element = dotted_name(call.args[0].value)
            return ("add", [element]) if element is not None else None
        if call.func.attr.value == "extend":
            added = names_of(call.args[0].value)
            return ("add", added) if added is not None else None
    if isinstance(statement, (cst.Assign, cst.AugAssign, cst.AnnAssign, cst.Expr, cst.Del)) \
            and not _only_reads(statement, name):
        return None
    return _UNTOUCHED


def _only_reads(statement: cst.BaseSmallStatement, name: str) -> bool:
    """Whether the list appears only as an argument or a value read (`print(len(nets))`), never
    as a target or the receiver of a method (`nets.insert(0, E)`, `nets[0] = E`, `del nets[0]`)."""
    if isinstance(statement, cst.Del):
        return False
    targets: list[cst.CSTNode] = []
    if isinstance(statement, cst.Assign):
        targets = [target.target for target in statement.targets]
    elif isinstance(statement, (cst.AugAssign, cst.AnnAssign)):
        targets = [statement.target]
    if any(read.value == name for target in targets for read in find_all(target, cst.Name)):
        return False
    return not any(isinstance(node.value, cst.Name) and node.value.value == name
                   for node in find_all(statement, cst.Attribute))


def literal_elements(value: cst.BaseExpression, parameters: Optional[list[str]] = None) -> list[str]:
    """`["G", "D"]` for `(G, D)` or `[G, D]`; `["#0"]` for the first of `parameters`."""
    if isinstance(value, (cst.Tuple, cst.List)):
        found = [dotted_name(element.value) for element in value.elements
                 if not isinstance(element, cst.StarredElement)]
        return [name for name in found if name is not None] if all(found) else []
    name = dotted_name(value)
    if parameters is not None and name in parameters:
        return [f"#{parameters.index(name)}"]
    return []


def _binds(target: cst.BaseExpression, name: str) -> bool:
    return isinstance(target, cst.Name) and target.value == name
