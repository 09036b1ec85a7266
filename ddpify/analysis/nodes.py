"""Readers of single nodes: names, literals, arguments, the names a function binds.

They need no facts, only the node, so every other module of ddpify may use them.
"""
from collections.abc import Sequence
from typing import Callable, Optional, TypeVar, Union, cast

import libcst as cst

from ddpify.analysis import memo, traversal

_Found = TypeVar("_Found", bound=cst.CSTNode)

# Statements as libcst builds them: a line of small statements, or an if/for/def/...
Statement = Union[cst.SimpleStatementLine, cst.BaseCompoundStatement]
# The block a statement sits in: the module or an indented block (never a one-line suite,
# which holds small statements).
Block = Union[cst.Module, cst.IndentedBlock]


def statements_in(block: Block) -> Sequence[Statement]:
    """A block's body as libcst builds it: IndentedBlock.body is typed Sequence[BaseStatement],
    whose only kinds are the two of Statement. The same sequence, not a copy."""
    return cast(Sequence[Statement], block.body)


def returned_name(function: cst.FunctionDef) -> str:
    """The name a loader built in a return statement goes by: not a valid identifier, so
    it never meets a name of the script."""
    return f"<return of {function.name.value}>"


def unmoved(value: cst.BaseExpression) -> cst.BaseExpression:
    """`model.to(device)` / `model.cuda()` -> `model`: the same module, moved."""
    while (
        isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
        and value.func.attr.value in ("to", "cuda", "cpu", "train", "eval", "float", "double",
                                      "half")
    ):
        value = value.func.value
    return value


def dotted_name(node: cst.BaseExpression) -> Optional[str]:
    """`self.model` -> "self.model"; None for anything but names and attribute chains."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = dotted_name(node.value)
        return f"{base}.{node.attr.value}" if base else None
    return None


def string_value(node: cst.BaseExpression) -> Optional[str]:
    if isinstance(node, cst.SimpleString):
        return node.evaluated_value if isinstance(node.evaluated_value, str) else None
    return None


def is_fixed_gpu(node: cst.BaseExpression) -> bool:
    """A literal that names one GPU for every process: "cuda", "cuda:0", or 0."""
    text = string_value(node)
    if text is not None:
        return text == "cuda" or text.startswith("cuda:")
    return isinstance(node, cst.Integer)


def names_a_values_device(node: cst.BaseExpression) -> bool:
    """`img.get_device()`, `x.device`, `torch.cuda.current_device()`: a device read from a value
    (or the current one, which the setup makes this rank's), not one fixed in the source.
    `.cuda(img.get_device())` moves onto the GPU another tensor already sits on, which is this
    rank's under DDP: it is right as written and kept (nothing of the user's deleted)."""
    if isinstance(node, cst.Attribute):
        return node.attr.value == "device"
    return (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and not node.args
            and (node.func.attr.value == "get_device" or dotted_name(node.func) == "torch.cuda.current_device"))


# The device types a script names by a bare string ("mps" on a Mac, "xpu" on Intel GPUs).
DEVICE_TYPE_STRINGS = ("cuda", "cpu", "mps", "xpu", "npu", "hpu", "mtia")


def is_string_choice(value: cst.BaseExpression) -> bool:
    """`"cuda" if cond else "cpu"`, `"cuda:0" if cond else "cpu"`, or `"cuda" if ... else "mps"
    if ... else "cpu"`: a string stays a string (its GPU index becomes the rank's own,
    `f"cuda:{local_rank}"`)."""
    if isinstance(value, cst.IfExp):
        return is_string_choice(value.body) and is_string_choice(value.orelse)
    text = string_value(value)
    return text is not None and (text in DEVICE_TYPE_STRINGS or is_fixed_gpu(value))


def is_true(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value == "True"


def is_false(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value in ("False", "None")


def keyword_args(call: cst.Call) -> dict[str, cst.Arg]:
    return {arg.keyword.value: arg for arg in call.args if arg.keyword is not None}


def positional_args(call: cst.Call) -> list[cst.BaseExpression]:
    return [arg.value for arg in call.args if arg.keyword is None and not arg.star]


def argument_for(call: cst.Call, parameter: str, position: Optional[int]) -> Optional[cst.BaseExpression]:
    """The value a call passes for a parameter, by keyword or by position. A position is not
    read past a `*args`, whose length nothing here knows (a `**kwargs` moves no position)."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == parameter:
            return arg.value
    positional = [arg for arg in call.args if arg.keyword is None and not arg.star]
    if position is not None and position < len(positional) and not any(arg.star == "*" for arg in call.args):
        return positional[position].value
    return None


def literal_open_mode(call: cst.Call) -> Optional[str]:
    """The mode of `open(path, mode)` when it is written out as a string; None when it is
    not given or not a literal."""
    mode = argument_for(call, "mode", 1)
    return string_value(mode) if mode is not None else None


def opens_for_writing(call: cst.Call) -> bool:
    """`open(path, mode)` with a literal mode that writes ("w", "a", "x" or "+"); a mode not
    written out is not taken for a write."""
    mode = literal_open_mode(call)
    return mode is not None and any(letter in mode for letter in "wax+")


def positional_parameters(function: cst.FunctionDef) -> list[str]:
    """The names a call can fill by position, in order."""
    return [param.name.value for param in [*function.params.posonly_params, *function.params.params]]


def parameter_names(function: cst.FunctionDef) -> set[str]:
    """The names a call can fill, by position or by keyword (not *args, **kwargs)."""
    return {*positional_parameters(function), *(param.name.value for param in function.params.kwonly_params)}


def handed_for(call: cst.Call, function: cst.FunctionDef, parameter: str) -> Optional[cst.BaseExpression]:
    """The value a call of `function` passes for one of its parameters (argument_for, with
    the parameter's position read from the definition)."""
    return argument_among(call, parameter, positional_parameters(function))


def argument_among(call: cst.Call, parameter: str, positional: list[str]) -> Optional[cst.BaseExpression]:
    """The value a call passes for `parameter`, by keyword or by its place in `positional`
    (the names the callee takes by position, as read from its definition here or in another
    module)."""
    return argument_for(call, parameter, positional.index(parameter) if parameter in positional else None)


def init_takes_sampler(node: cst.ClassDef) -> bool:
    """A DataLoader subclass forwards `sampler=` unless its own __init__ drops it."""
    for statement in node.body.body:
        if isinstance(statement, cst.FunctionDef) and statement.name.value == "__init__":
            params = statement.params
            return isinstance(params.star_kwarg, cst.Param) or any(
                param.name.value == "sampler" for param in (*params.params, *params.kwonly_params)
            )
    return True


def slices_batches(loop: cst.For) -> bool:
    """`for i in range(0, n, batch_size): xb = x[i:i + batch_size]`: batches cut by hand."""
    if not (
        isinstance(loop.target, cst.Name)
        and isinstance(loop.iter, cst.Call)
        and isinstance(loop.iter.func, cst.Name)
        and loop.iter.func.value == "range"
        and len(loop.iter.args) == 3
    ):
        return False
    index = loop.target.value
    found = []

    class _Slices(cst.CSTVisitor):
        def visit_Slice(self, node: cst.Slice) -> None:
            if isinstance(node.lower, cst.Name) and node.lower.value == index:
                found.append(node)

    traversal.visit(loop.body, _Slices())
    return bool(found)


def self_attributes(method: cst.FunctionDef) -> list[tuple[str, Optional[cst.Assign]]]:
    """(attribute, the Assign that sets it, or None for a read) for each `self.x` in a method."""
    attributes = _SelfAttributes()
    traversal.visit(method.body, attributes)
    return attributes.found


class _SelfAttributes(cst.CSTVisitor):
    """self_attributes' walk (made once, at module level, as _Names is)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, Optional[cst.Assign]]] = []

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            name = dotted_name(target.target)
            if name and name.startswith("self.") and name.count(".") == 1:
                self.found.append((name[5:], node))
        traversal.visit(node.value, self)

    def visit_AssignTarget(self, node: cst.AssignTarget) -> bool:
        return False

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if isinstance(node.value, cst.Name) and node.value.value == "self":
            self.found.append((node.attr.value, None))


def self_reads(method: cst.FunctionDef) -> list[tuple[str, cst.Attribute]]:
    """(attribute, the node) for each read of `self.x` in a method, as self_attributes finds
    them (not the targets of assignments)."""
    assigned = {id(target.target) for assign in find_all(method.body, cst.Assign) for target in assign.targets}
    return [(node.attr.value, node) for node in find_all(method.body, cst.Attribute)
            if isinstance(node.value, cst.Name) and node.value.value == "self" and id(node) not in assigned]


def returns_in(function: cst.FunctionDef) -> list[cst.Return]:
    """The function's own return statements, not those of functions defined inside it."""
    return find_all(function.body, cst.Return, into_functions=False)


def names_bound_in(function: cst.FunctionDef) -> set[str]:
    """Parameters and names assigned in a function (not those it declares global)."""
    params = function.params
    bound = {param.name.value for param in (*params.params, *params.kwonly_params,
                                            *params.posonly_params)}
    for star in (params.star_arg, params.star_kwarg):
        if isinstance(star, cst.Param):
            bound.add(star.name.value)
    declared_global: set[str] = set()

    class _Bindings(cst.CSTVisitor):
        def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
            bound.update(target_names(node.target))

        def visit_For(self, node: cst.For) -> None:
            bound.update(target_names(node.target))

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            bound.update(target_names(node.target))

        def visit_Global(self, node: cst.Global) -> None:
            declared_global.update(item.name.value for item in node.names)

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is function

    traversal.visit(function, _Bindings())
    return bound - declared_global


def target_names(target: cst.BaseExpression) -> set[str]:
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, (cst.Tuple, cst.List)):
        return set().union(*(target_names(element.value) for element in target.elements))
    return set()


def assignment_pairs(target: cst.BaseExpression,
                     value: cst.BaseExpression) -> list[tuple[cst.BaseExpression, cst.BaseExpression]]:
    """The (target, value) pairs of an assignment: `a, b, bar = 0.0, 0, tqdm(loader)` binds
    each name to its own element, as three assignments would; anything else is one pair."""
    if isinstance(target, (cst.Tuple, cst.List)) and isinstance(value, (cst.Tuple, cst.List)) and len(
            target.elements) == len(value.elements) and not any(
            isinstance(element, cst.StarredElement) for element in (*target.elements, *value.elements)):
        return [(left.value, right.value) for left, right in zip(target.elements, value.elements)]
    return [(target, value)]


def made_one_each(target: cst.BaseExpression,
                  value: cst.BaseExpression) -> list[tuple[cst.BaseExpression, cst.BaseExpression]]:
    """assignment_pairs, and `a, b = [Maker() for _ in range(2)]` (or a generator): each name
    is bound to one object the comprehension's call makes."""
    if isinstance(target, (cst.Tuple, cst.List)) and isinstance(value, (cst.ListComp, cst.GeneratorExp)) \
            and isinstance(value.elt, cst.Call) and value.for_in.inner_for_in is None and not value.for_in.ifs \
            and not any(isinstance(element, cst.StarredElement) for element in target.elements):
        return [(element.value, value.elt) for element in target.elements]
    return assignment_pairs(target, value)



def find_all(node: cst.CSTNode, kind: type[_Found], *, into_functions: bool = True) -> list[_Found]:
    """Every node of `kind` within node (node included), in source order; with
    `into_functions=False` no function definition (node itself neither) is searched."""
    members = _KIND_MEMBERS.get(kind)
    if members is None:
        members = _KIND_MEMBERS[kind] = {}
    found: list[_Found] = []
    for child in _subtree(node, into_functions):
        member = members.get(child.__class__)
        if member is None:
            member = members[child.__class__] = isinstance(child, kind)
        if member:
            found.append(cast(_Found, child))
    return found


# For each kind find_all was asked for, whether a node class is of it: libcst's classes are
# ABCs, whose isinstance is a Python-level call per node; the rules ask find_all for one kind
# after another over the same subtrees.
_KIND_MEMBERS: dict[type, dict[type, bool]] = {}


# Every node of an analysed module mapped to the module's visit order (as `traversal.visit`
# meets the nodes), where each node's subtree ends in that order, and the node's own index:
# the subtree of any node of the module is then a slice, not a walk. The analysis visits the
# whole module once anyway (reading.analyse records the order on that visit); before this,
# find_all walked each function, loop and statement it was asked about again, a tenth of a
# migration's time.
_MODULE_ORDER: dict[cst.CSTNode, tuple[list[cst.CSTNode], list[int], int]] = memo.per_migration_store()


def remember_module_order(order: list[cst.CSTNode], ends: list[int]) -> None:
    """A whole module's visit order (`order[i]`'s subtree is `order[i:ends[i]]`), kept
    until the migration ends (ddpify.analysis.memo)."""
    for index, node in enumerate(order):
        _MODULE_ORDER[node] = (order, ends, index)


@memo.per_migration
def _subtree(node: cst.CSTNode, into_functions: bool) -> tuple[cst.CSTNode, ...]:
    """The nodes find_all searches, in source order: the rules search the same function and
    loop bodies for one kind of node after another (ddpify.analysis.memo)."""
    # (A class test, not isinstance: libcst's FunctionDef has no subclasses, and its classes
    # are ABCs, whose isinstance is a Python-level call on every node of the walk.)
    known = _MODULE_ORDER.get(node)
    if known is not None:
        order, ends, start = known
        if into_functions:
            return tuple(order[start:ends[start]])
        if node.__class__ is cst.FunctionDef:
            return (node,)
        # The node itself, then its subtree less every function definition's inside.
        found = [node]
        index, end = start + 1, ends[start]
        while index < end:
            child = order[index]
            found.append(child)
            index = ends[index] if child.__class__ is cst.FunctionDef else index + 1
        return tuple(found)
    # A subtree asked for while the analysis is still visiting the module (its order is not
    # known yet): traversal.preorder, inlined, as this walk runs for every node of it.
    found, pending = [], [node]
    while pending:
        current = pending.pop()
        found.append(current)
        if into_functions or current.__class__ is not cst.FunctionDef:
            pending.extend(reversed(traversal.children(current)))
    return tuple(found)


def within(node: cst.CSTNode) -> tuple[cst.CSTNode, ...]:
    """Every node within node (node first), in the order a visit meets them: for a search for
    several kinds at once whose results keep that order."""
    return _subtree(node, True)


def calls_within(node: Optional[cst.CSTNode]) -> list[cst.Call]:
    """Every call inside a node, the node itself included."""
    return [] if node is None else find_all(node, cst.Call)


def names_within(node: cst.CSTNode) -> list[str]:
    names = _Names()
    traversal.visit(node, names)
    return names.found


class _Names(cst.CSTVisitor):
    """names_within's walk. (A class made at module level: one defined inside the function,
    which is called for every statement of some rules, cost more to make than its walk.)"""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def visit_Name(self, name: cst.Name) -> None:
        self.found.append(name.value)

    def visit_Attribute(self, attribute: cst.Attribute) -> bool:
        dotted = dotted_name(attribute)
        if dotted:
            self.found.append(dotted)
        # `self.train_loader` reads `self`, not a variable named `train_loader`.
        traversal.visit(attribute.value, self)
        return False


def names_in(node: Optional[cst.CSTNode]) -> set[str]:
    return _names_in(node) if node is not None else set()


def _names_in(node: cst.CSTNode) -> set[str]:
    """Every Name within node but an attribute's own (`self.train_loader` reads `self`, not
    a variable named `train_loader`): read off find_all's subtree, not walked again."""
    within = _subtree(node, True)
    attributes = {id(child.attr) for child in within if child.__class__ is cst.Attribute}
    return {child.value for child in within
            if child.__class__ is cst.Name and id(child) not in attributes}


def first_free(name: str, is_taken: Callable[[str], bool]) -> str:
    """`name`, or `name_`, `name__`, ...: the first that `is_taken` refuses; every name
    ddpify adds to a script is chosen here."""
    while is_taken(name):
        name += "_"
    return name


def targets_bound_in(node: cst.CSTNode) -> list[cst.BaseExpression]:
    """The target of every binding in node: assignments (plain, augmented, annotated), for
    loops and `as` clauses, nested functions included."""
    found: list[cst.BaseExpression] = []
    for child in _subtree(node, True):
        kind = child.__class__
        if kind is cst.AssignTarget or kind is cst.AugAssign or kind is cst.AnnAssign or kind is cst.For:
            found.append(child.target)  # type: ignore[attr-defined]
        elif kind is cst.AsName:
            found.append(child.name)  # type: ignore[attr-defined]
    return found


def assigned_names(node: cst.CSTNode) -> set[str]:
    """Every name a binding in node touches, as names_in reads a target (`self.x = ...`
    touches `self`)."""
    return set().union(*(names_in(target) for target in targets_bound_in(node)))


def yields_each_batch(loop: cst.For, function: Optional[cst.FunctionDef]) -> bool:
    """Rule: a loop in a loader wrapper's `__iter__` that yields its batches on (`def
    __iter__(self): for b in self.dl: yield to_device(b, self.device)`, the "Zero to GANs"
    course's DeviceDataLoader) is no pass of its own: the batches are read where the wrapper is
    iterated, and that loop is judged there. A generator function of another name (`def
    predict(loader): for x in loader: yield model(x)`) stays a pass."""
    return function is not None and function.name.value == "__iter__" \
        and bool(find_all(loop.body, cst.Yield, into_functions=False))
