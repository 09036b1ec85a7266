"""Models kept in a container: `modules = {"net": Net(), ...}`, its entries moved to the
device (`for k in modules: modules[k] = modules[k].to(device)`), the model taken out by key
(`net = modules["net"]`). The model's own name is never moved, but its value is."""
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple, Optional, cast

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
                      named: Optional[Callable[[cst.BaseExpression, cst.CSTNode], Optional[cst.BaseExpression]]] = None
                      ) -> list[str]:
    """The names a loop variable stands for in turn where `node` reads it: `G` and `D` for
    `m` in `for m in (G, D): m.to(device)`, `[m.cuda() for m in [enc, dec]]` or
    `map(lambda m: m.to(device), (G, D))`. A move of the variable is a move of each of them:
    the models reach their device there, so the wrap comes after the loop (and takes the
    GPU's device_ids), never before it. Only a literal tuple or list of plain names or
    attributes is followed; `parameters` (the enclosing function's positional parameters)
    turns a loop over one of them into `#N`, its position (`def to_gpu(models): return
    [m.cuda() for m in models]`), which the callers resolve; `named` gives the one literal
    what the loop iterates (`nets`, `nets.values()`) holds before the loop (`nets = [G, D]`),
    if any."""
    child, parent = node, parents.get(node)
    while parent is not None and not isinstance(parent, (cst.FunctionDef, cst.ClassDef, cst.Module)):
        iterated: Optional[cst.BaseExpression] = None
        if isinstance(parent, cst.For) and child is not parent.iter and (
                _binds(parent.target, name) or _binds_value_of_items(parent, name)):
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
            # `nets = [G, D]` then `for m in nets:`: the list the name holds (or the dict's
            # values, `for m in nets.values()`).
            held = named(iterated, parent) if named is not None else None
            return literal_elements(held if held is not None else iterated, parameters)
        child, parent = parent, parents.get(parent)
    return []


# Views of a module that yield its submodules (the last element of each pair for the named ones).
_SUBMODULE_VIEWS = frozenset({"children", "modules", "named_children", "named_modules", "values", "items"})


def iterated_module(parents: Mapping[cst.CSTNode, cst.CSTNode], node: cst.CSTNode, name: str) -> Optional[str]:
    """`model` where `node` moves the loop variable `name` of `for layer in model:`, `for
    child in model.children():`, `for _, m in model.named_modules():` or `for m in
    nets.values():`: a move of each submodule moves the module's parameters, so the module
    reaches its device in that loop (the wrap follows it). Only a statement move of a plain
    loop variable (`layer.to(device)`), in a `for` of the same function; None otherwise."""
    if not isinstance(parents.get(node), cst.Expr):
        return None
    return module_looped_over(parents, node, name)


def module_looped_over(parents: Mapping[cst.CSTNode, cst.CSTNode], node: cst.CSTNode, name: str) -> Optional[str]:
    """`model` where `node` reads the loop variable `name` of `for layer in model:` (or of
    its `.children()`, `.modules()`, `.named_children()`...); None otherwise."""
    child, parent = node, parents.get(node)
    while parent is not None and not isinstance(parent, (cst.FunctionDef, cst.ClassDef, cst.Module, cst.Lambda)):
        if isinstance(parent, cst.For) and child is not parent.iter:
            iterated = parent.iter
            view: Optional[str] = None
            if isinstance(iterated, cst.Call) and not iterated.args and isinstance(iterated.func, cst.Attribute):
                view, iterated = iterated.func.attr.value, iterated.func.value
            target: cst.BaseExpression = parent.target
            if isinstance(iterated, cst.Call) and dotted_name(iterated.func) == "enumerate" and iterated.args:
                view, iterated = "enumerate", iterated.args[0].value  # `for i, layer in enumerate(layers)`
            if view in ("named_children", "named_modules", "items", "enumerate") \
                    and isinstance(target, cst.Tuple) and len(target.elements) == 2:
                target = target.elements[1].value
                view = None if view == "enumerate" else view
            if _binds(target, name):
                return dotted_name(iterated) if view is None or view in _SUBMODULE_VIEWS else None
        child, parent = parent, parents.get(parent)
    return None


class Entry(NamedTuple):
    """A model put into a container before the loop that moves what it holds: its name, and
    the `if` test it was put in under (`if args.critic: models.append(critic)`), None when it
    always was; `holds` is False for an entry of the `else` branch."""
    name: str
    test: Optional[cst.BaseExpression] = None
    holds: bool = True


def condition_code(module: cst.Module, test: cst.BaseExpression, holds: bool) -> str:
    """The code of the test an entry was put in under, as a condition after `and`: `args.critic`,
    `(a or b)`, `not args.critic`."""
    if not holds:
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            return condition_code(module, test.expression, True)
        return f"not {condition_code(module, test, True)}"
    code = module.code_for_node(test)
    loose = isinstance(test, (cst.BooleanOperation, cst.IfExp, cst.NamedExpr, cst.Lambda)) and not test.lpar
    return f"({code})" if loose else code


def gathered_elements(parents: Mapping[cst.CSTNode, cst.CSTNode], loop: cst.CSTNode, name: str,
                      view: Optional[str] = None) -> Optional[list[Entry]]:
    """The names a list or dict holds when `loop` runs, where the statements before it build it
    from plain names: `nets = []`, `nets.append(G)`, `nets.insert(0, G)`, `nets += [D]`,
    `nets.extend([E])` (G, D, E) for a list; `nets = {}`, `nets["G"] = G`, `nets.update(D=D)`
    for a dict, whose `view` (`values` or `items`, never its keys) the loop iterates. An entry
    put in under an `if` (or its `else`) whose body only puts entries in holds that condition.
    Only the statements that surely ran before the loop, in the blocks around it, are read;
    None where the container is not built that way (no literal bound, an element that is not
    a plain name, another change of it, or one in a loop before it): then no element is known
    to be moved there."""
    is_dict: Optional[bool] = None
    entries: dict[object, Entry] = {}
    for statement in _statements_before(parents, loop):
        if isinstance(statement, cst.If):
            added = _entries_put_in_under(statement, name, is_dict, entries)
            if added is None:
                return None
            entries.update(added)
            continue
        small = statement.body if isinstance(statement, cst.SimpleStatementLine) else None
        if small is None:
            if any(read.value == name for read in find_all(statement, cst.Name)):
                return None  # changed in a loop, perhaps
            continue
        for part in small:
            found = _container_step(part, name)
            if found is None:
                return None
            if found is _UNTOUCHED:
                continue
            if found.binds:
                is_dict, entries = found.is_dict, {}
            elif is_dict is None or found.is_dict != is_dict:
                return None
            entries.update((key, Entry(element)) for key, element in found.entries)
    if is_dict is None or is_dict != (view is not None):
        return None  # a dict's keys are not its models; a list has no views
    return list(entries.values())


def _entries_put_in_under(statement: cst.If, name: str, is_dict: Optional[bool],
                          entries: dict[object, Entry]) -> Optional[dict[object, Entry]]:
    """The entries the branches of `statement` put into the container, each with the test it
    holds under (none where both branches put the same one in); None where the `if` does
    more, the container does not exist yet, or a branch replaces an entry held before."""
    branches = _conditional_steps(statement, name)
    if branches is None:
        return None
    added: dict[object, Entry] = {}
    for holds, steps in branches:
        for step in steps:
            if is_dict is None or step.is_dict != is_dict or any(key in entries for key, _ in step.entries):
                return None
            for key, element in step.entries:
                if key not in added:
                    added[key] = Entry(element, statement.test, holds)
                elif added[key].name == element and added[key].holds != holds:
                    added[key] = Entry(element)  # the same entry on both paths
                else:
                    return None
    return added


def _conditional_steps(statement: cst.If, name: str) -> Optional[list[tuple[bool, list["_Step"]]]]:
    """(whether the test holds, steps) for each branch of `if test: nets.append(G)` / `else:
    nets.append(D)` that only puts entries into `name`; [] where the `if` does not touch `name`;
    None where it changes it otherwise, reads it in its test, or has an `elif`."""
    if not any(read.value == name for read in find_all(statement, cst.Name)):
        return []
    orelse = statement.orelse
    if isinstance(orelse, cst.If) or any(read.value == name for read in find_all(statement.test, cst.Name)):
        return None
    branches: list[tuple[bool, cst.BaseSuite]] = [(True, statement.body)]
    if isinstance(orelse, cst.Else):
        branches.append((False, orelse.body))
    found: list[tuple[bool, list[_Step]]] = []
    for holds, suite in branches:
        steps: list[_Step] = []
        body = suite.body if isinstance(suite, cst.IndentedBlock) else [suite]
        for line in body:
            if not isinstance(line, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
                if any(read.value == name for read in find_all(line, cst.Name)):
                    return None
                continue
            for part in line.body:
                step = _container_step(part, name)
                if step is None or (step is not _UNTOUCHED and step.binds):
                    return None
                if step is not _UNTOUCHED:
                    steps.append(step)
        found.append((holds, steps))
    return found


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


class _Step(NamedTuple):
    """What one statement does to the container: binds it afresh (`binds`) or puts entries
    into it, each (key, plain name); a list's keys are unique markers (its entries never
    replace one another), a dict's are the literal key's code."""
    binds: bool
    is_dict: bool
    entries: list[tuple[object, str]]


_UNTOUCHED = _Step(False, False, [])


def _container_step(statement: cst.BaseSmallStatement, name: str) -> Optional[_Step]:
    """The step for `name = [G, D]`, `name = {"G": G}`, `name = dict(G=G)` (binds),
    `name.append(G)`, `name.insert(0, G)`, `name += [G]`, `name.extend([G])` (a list's),
    `name["G"] = G`, `name.update({"G": G})` or `name.update(G=G)` (a dict's); _UNTOUCHED
    where the statement does not name the container; None where it changes it otherwise or
    puts in something other than plain names under literal keys."""
    if not any(read.value == name for read in find_all(statement, cst.Name)):
        return _UNTOUCHED
    if isinstance(statement, cst.Assign) and len(statement.targets) == 1:
        assigned = _assign_step(statement, name)
        if assigned is not _UNTOUCHED:
            return assigned
    if isinstance(statement, cst.AugAssign) and isinstance(statement.target, cst.Name) \
            and statement.target.value == name and isinstance(statement.operator, cst.AddAssign):
        added = _list_names(statement.value)
        return _Step(False, False, _listed(added)) if added is not None else None
    call = statement.value if isinstance(statement, cst.Expr) else None
    if isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Name) \
            and call.func.value.value == name and not any(arg.star for arg in call.args) \
            and not any(_names(arg.value, name) for arg in call.args):
        return _call_step(call.func.attr.value, call.args)
    if isinstance(statement, (cst.Assign, cst.AugAssign, cst.AnnAssign, cst.Expr, cst.Del)) \
            and not _only_reads(statement, name):
        return None
    return _UNTOUCHED


def _listed(elements: Sequence[str]) -> list[tuple[object, str]]:
    """A list's entries, each under a key of its own: they never replace one another."""
    return [(object(), element) for element in elements]


def _assign_step(statement: cst.Assign, name: str) -> Optional[_Step]:
    """`name = [G]`, `name = {"G": G}` (binds) or `name["G"] = G` (puts in)."""
    target = statement.targets[0].target
    if isinstance(target, cst.Name) and target.value == name:
        held = _list_names(statement.value)
        if held is not None:
            return _Step(True, False, _listed(held))
        keyed = _dict_names(statement.value)
        return _Step(True, True, keyed) if keyed is not None else None
    if isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name) and target.value.value == name:
        key = _literal_key(target)
        element = dotted_name(statement.value)
        if key is None or element is None or _names(statement.value, name):
            return None
        return _Step(False, True, [(key, element)])
    return _UNTOUCHED


def _call_step(method: str, args: Sequence[cst.Arg]) -> Optional[_Step]:
    """`name.append(G)`, `name.insert(0, G)`, `name.extend([G])`, `name.update(G=G)`; None for
    any other method (it may change the container)."""
    positional = [arg.value for arg in args if arg.keyword is None]
    element = dotted_name(positional[-1]) if positional else None
    if method in ("append", "insert") and len(args) == len(positional) == (1 if method == "append" else 2) \
            and element is not None:
        return _Step(False, False, _listed([element]))
    if method == "extend" and len(args) == len(positional) == 1:
        added = _list_names(positional[0])
        return _Step(False, False, _listed(added)) if added is not None else None
    if method == "update":
        keyed = _dict_names(cst.Call(cst.Name("dict"), args))
        return _Step(False, True, keyed) if keyed is not None else None
    return None if method not in _READING_METHODS else _UNTOUCHED


# Methods that read a container without changing it.
_READING_METHODS = frozenset({"values", "items", "keys", "get", "index", "count", "copy", "__len__"})


def _names(value: cst.BaseExpression, name: str) -> bool:
    return any(read.value == name for read in find_all(value, cst.Name))


def _list_names(value: cst.BaseExpression) -> Optional[list[str]]:
    """G, D for `[G, D]` or `(G, D)` (nothing for `[]` or `list()`); None for anything else."""
    if isinstance(value, cst.Call) and dotted_name(value.func) == "list" and not value.args:
        return []
    if not isinstance(value, (cst.Tuple, cst.List)) or any(
            isinstance(element, cst.StarredElement) for element in value.elements):
        return None
    found = [dotted_name(element.value) for element in value.elements]
    return [element for element in found if element is not None] if all(found) else None


def _dict_names(value: cst.BaseExpression) -> Optional[list[tuple[object, str]]]:
    """(key, name) for `{"G": G, "D": D}` or `dict(G=G, D=D)` (nothing for `{}` or `dict()`);
    None for anything else, a key that is not a literal or a value that is not a plain name."""
    pairs: list[tuple[Optional[str], Optional[str]]] = []
    if isinstance(value, cst.Dict):
        for element in value.elements:
            if not isinstance(element, cst.DictElement):
                return None
            pairs.append((_literal(element.key), dotted_name(element.value)))
    elif isinstance(value, cst.Call) and dotted_name(value.func) == "dict" and all(
            arg.keyword is not None and not arg.star for arg in value.args):
        pairs = [(repr(cast(cst.Name, arg.keyword).value), dotted_name(arg.value)) for arg in value.args]
    elif isinstance(value, cst.Call) and dotted_name(value.func) == "dict" and len(value.args) == 1 \
            and value.args[0].keyword is None and isinstance(value.args[0].value, cst.Dict):
        return _dict_names(value.args[0].value)
    else:
        return None
    if not all(key is not None and element is not None for key, element in pairs):
        return None
    return [(cast(str, key), cast(str, element)) for key, element in pairs]


def _literal_key(subscript: cst.Subscript) -> Optional[str]:
    if len(subscript.slice) != 1 or not isinstance(subscript.slice[0].slice, cst.Index):
        return None
    return _literal(subscript.slice[0].slice.value)


def _literal(node: cst.BaseExpression) -> Optional[str]:
    """A key's value as `repr` gives it (`'G'` for `"G"` and `'G'`), for a string or number."""
    if isinstance(node, cst.SimpleString):
        return repr(node.evaluated_value)
    if isinstance(node, cst.Integer):
        return repr(int(node.value, 0))
    return None


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


def _binds_value_of_items(loop: cst.For, name: str) -> bool:
    """`for key, name in container.items():`."""
    target = loop.target
    return isinstance(target, cst.Tuple) and len(target.elements) == 2 \
        and _binds(target.elements[1].value, name) and iterated_view(loop.iter)[1] == "items"


def iterated_view(iterated: cst.BaseExpression) -> tuple[Optional[str], Optional[str]]:
    """("nets", None) for `nets`, ("nets", "values") for `nets.values()`, ("nets", "items") and
    ("nets", "keys") likewise; (None, None) for anything else."""
    if isinstance(iterated, cst.Name):
        return iterated.value, None
    if isinstance(iterated, cst.Call) and not iterated.args and isinstance(iterated.func, cst.Attribute) \
            and isinstance(iterated.func.value, cst.Name) and iterated.func.attr.value in ("values", "items", "keys"):
        return iterated.func.value.value, iterated.func.attr.value
    return None, None


def keyed_loop(parents: Mapping[cst.CSTNode, cst.CSTNode], node: cst.CSTNode, container: str,
               key: str) -> Optional[cst.For]:
    """The loop over the keys of `container` (`for key in nets:` or `nets.keys()`) around
    `node`, which reads `nets[key]`: what it moves there is each value of the dict."""
    child, parent = node, parents.get(node)
    while parent is not None and not isinstance(parent, (cst.FunctionDef, cst.ClassDef, cst.Module)):
        if isinstance(parent, cst.For) and child is not parent.iter and _binds(parent.target, key):
            return parent if iterated_view(parent.iter) in ((container, None), (container, "keys")) else None
        child, parent = parent, parents.get(parent)
    return None
