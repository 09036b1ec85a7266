"""A gather of embeddings with their gradient (DDP410) feeds only a loss over in-batch negatives.

Gathering a batch's embeddings from every rank is right for exactly one use: the similarity
of a contrastive loss, whose labels follow the gathered size. Anywhere else it is silently
wrong: in an evaluation loop every rank holds the whole batch already (the gather repeats
it); a similarity built before the gather sees the shard only; labels sized by this rank's
inputs no longer match; a later per-sample use (a penalty, a classifier against this rank's
targets) reads rows of other ranks. The check reads the output alone, in the shape ddpify
writes: `a, b = gather(a), gather(b)` in a training loop's body, right after both are made,
right before the similarity, and nothing after it reading them but for their size.
"""
import ast
import re
from collections.abc import Iterator
from typing import Optional

from ddpify import ast_walk
from ddpify.selfcheck.source import Source, dotted, last_part

Finding = tuple[str, int, str]


def misplaced_gathers(migrated: Source) -> Iterator[Finding]:
    gathers = _gather_functions(migrated.tree)
    without_grad = _gather_functions(migrated.tree, with_grad=False) - gathers
    if not gathers and not without_grad:
        return
    seen: set[ast.stmt] = set()
    for call in migrated.calls:
        if dotted(call.func) not in gathers | without_grad:
            continue
        statement = _statement_of(migrated, call)
        if statement in seen:
            continue
        seen.add(statement)
        if dotted(call.func) in without_grad:
            # A gather of figures (evaluation) is not this check's; one in the shape of DDP410's,
            # feeding an in-batch similarity in a training loop, must carry the gradient.
            if _rebound(statement, without_grad) is None or _problem(migrated, statement, without_grad) is not None:
                continue
            yield "DDP923", statement.lineno, ("the gather carries no gradient (a plain all_gather): the "
                                               "other ranks' losses send none of theirs back to this rank's rows")
            continue
        problem = _problem(migrated, statement, gathers)
        if problem is not None:
            yield "DDP923", statement.lineno, problem


def _gather_functions(tree: ast.Module, with_grad: bool = True) -> set[str]:
    """Module-level functions that all_gather with the gradient: through an autograd Function
    of the module that all_gathers (its `apply`), or torch.distributed.nn's all_gather. With
    `with_grad` False: those that all_gather at all (a plain `dist.all_gather` into a list)."""
    if not with_grad:
        return {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and _all_gathers(node)}
    gathering_classes = {node.name for node in tree.body if isinstance(node, ast.ClassDef) and _all_gathers(node)
                         and any(isinstance(sub, ast.FunctionDef) and sub.name == "backward" for sub in node.body)}
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef)
            and any(_gathers_with_grad(sub, gathering_classes) for sub in ast_walk.walk(node))}


def _all_gathers(node: ast.AST) -> bool:
    return any(isinstance(sub, ast.Call) and last_part(sub.func) == "all_gather" for sub in ast_walk.walk(node))


def _gathers_with_grad(node: ast.AST, gathering_classes: set[str]) -> bool:
    if isinstance(node, ast.ImportFrom):
        return (node.module or "").startswith("torch.distributed.nn")
    if isinstance(node, ast.Call):
        name = dotted(node.func) or ""
        return name.startswith("torch.distributed.nn.") or isinstance(node.func, ast.Attribute) \
            and node.func.attr == "apply" and dotted(node.func.value) in gathering_classes
    return False


def _statement_of(source: Source, node: ast.AST) -> ast.stmt:
    while not isinstance(node, ast.stmt):
        node = source.parents[node]
    return node


def _problem(source: Source, statement: ast.stmt, gathers: set[str]) -> Optional[str]:
    names = _rebound(statement, gathers)
    if names is None:
        return "the gather does not rebind the embeddings it gathers (`a, b = gather(a), gather(b)`)"
    loop = source.parents.get(statement)
    if not isinstance(loop, (ast.For, ast.AsyncFor)) or statement not in loop.body \
            or not any(isinstance(sub, ast.Call) and last_part(sub.func) == "backward" for sub in ast_walk.walk(loop)):
        return "the gather is not in the body of a training loop (one that calls backward)"
    index = loop.body.index(statement)
    made = {name for earlier in loop.body[:index] for name in _bound_by(earlier)}
    if not set(names) <= made:
        return "a gathered name is not made earlier in the same loop body"
    for name in names:
        making = [earlier for earlier in loop.body[:index] if name in _bound_by(earlier)][-1]
        if isinstance(making, ast.Assign) and _views_of(making.value) is not None:
            return (f"`{name}` is a concatenation of two views, gathered whole: the ranks' rows fall between "
                    "each view and its pair; gather each view before the concatenation")
    if index + 1 == len(loop.body):
        return "no similarity follows the gather"
    loss_function = _loss_function_called(source, loop.body[index + 1], names)
    if loss_function is not None:
        function, parameters = loss_function
        start = next((position for position, statement in enumerate(function.body)
                      if set(parameters) & {node.id for node in ast_walk.walk(statement)
                                            if isinstance(node, ast.Name)}), 0)
        problem = _similarity_block(function.body, start, parameters, require_labels=True)
        if problem is not None:
            return f"in `{function.name}`, which the gathered embeddings are handed to: {problem}"
        return _similarity_block(loop.body, index + 1, names, require_labels=False, made=True)
    return _similarity_block(loop.body, index + 1, names, require_labels=True)


def _loss_function_called(source: Source, statement: ast.stmt, names: list[str]
                          ) -> Optional[tuple[ast.FunctionDef, list[str]]]:
    """A module-level function the statement calls with the gathered names as positional
    arguments (`loss = clip_loss(a, b)`), and its parameters they bind, in order."""
    for call in (node for node in ast_walk.walk(statement) if isinstance(node, ast.Call)):
        positions = {argument.id: position for position, argument in enumerate(call.args)
                     if isinstance(argument, ast.Name) and argument.id in names}
        function, parameters = _called_function(source, dotted(call.func))
        if function is not None and set(positions) == set(names) and not call.keywords \
                and max(positions.values()) < len(parameters):
            return function, [parameters[positions[name]] for name in names]
    return None


def _called_function(source: Source, callee: Optional[str]) -> tuple[Optional[ast.FunctionDef], list[str]]:
    """The module's function of that name, or the forward of the module's class an instance of
    that name was made from (`criterion = ClipLoss()`), with its parameters but `self`."""
    for node in source.tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == callee:
            return node, [argument.arg for argument in node.args.args]
    made_from = {dotted(assignment.value.func) for assignment in source.assignments
                 if isinstance(assignment, ast.Assign) and isinstance(assignment.value, ast.Call)
                 and any(dotted(target) == callee for target in assignment.targets)}
    for node in source.tree.body:
        if isinstance(node, ast.ClassDef) and node.name in made_from and len(made_from) == 1:
            forward = next((method for method in node.body if isinstance(method, ast.FunctionDef)
                            and method.name == "forward"), None)
            if forward is not None:
                return forward, [argument.arg for argument in forward.args.args[1:]]
    return None, []


def _similarity_block(body: list[ast.stmt], index: int, names: list[str], require_labels: bool,
                      made: bool = False) -> Optional[str]:
    """body[index] makes the similarity of `names` (`made`: a call handed them did), the
    statements after it read them for their size only, and every torch.arange after it (at
    least one, where required) is sized by the similarity."""
    concat = body[index]
    views = _views_of(concat.value) if isinstance(concat, ast.Assign) and not made else None
    if views is not None:
        assert isinstance(concat, ast.Assign)
        if sorted(views) != sorted(names) or len(concat.targets) != 1 or not isinstance(concat.targets[0], ast.Name) \
                or index + 1 == len(body):
            return "the concatenation after the gather is not of the two gathered views alone"
        return _views_block(body, index + 1, [*names, concat.targets[0].id], require_labels)
    similarity = body[index]
    if made:
        sizes = set(names)
    elif not (isinstance(similarity, ast.Assign) and len(similarity.targets) == 1
              and isinstance(similarity.targets[0], ast.Name) and _similarity_of(similarity.value, set(names))):
        return "the statement after the gather is not the similarity of the gathered embeddings"
    else:
        sizes = {*names, similarity.targets[0].id}
    aranges = []
    for later in body[index + 1:]:
        for node in _reads(later, set(names)):
            if not _size_of(node, set(names)) and not _device_of(node, set(names)):
                return f"`{dotted(node) or names[0]}` is read after the similarity for more than its size"
        aranges += [sub for sub in ast_walk.walk(later)
                    if isinstance(sub, ast.Call) and last_part(sub.func) == "arange"]
    if (require_labels and not aranges) or not all(sub.args and _size_of(sub.args[0], sizes) for sub in aranges):
        return "the labels (torch.arange) are not sized by the gathered similarity"
    return None


def _views_of(value: ast.expr) -> Optional[list[str]]:
    """[a, b] of `torch.cat([a, b])` (dim 0), row-wise normalized or not: two views of a batch."""
    if isinstance(value, ast.Call) and last_part(value.func) == "normalize" and value.args:
        value = value.args[0]
    if not (isinstance(value, ast.Call) and last_part(value.func) == "cat" and value.args
            and isinstance(value.args[0], (ast.List, ast.Tuple)) and len(value.args[0].elts) == 2):
        return None
    dims = [*value.args[1:], *(keyword.value for keyword in value.keywords if keyword.arg == "dim")]
    if any(not (isinstance(dim, ast.Constant) and dim.value == 0) for dim in dims):
        return None
    names = [element.id for element in value.args[0].elts if isinstance(element, ast.Name)]
    return names if len(set(names)) == 2 else None


def _views_block(body: list[ast.stmt], index: int, names: list[str], require_labels: bool) -> Optional[str]:
    """NT-Xent after a gather of each view and their concatenation (names[-1]): body[index]
    compares the concatenation with itself, the views and it are read after that for their
    size or device only, and every torch.arange after it is sized by them (a size of one of
    them, a name made from such sizes, sums and products of those with integers), never by
    a constant or a setting."""
    similarity = body[index]
    concatenation = names[-1]
    if not (isinstance(similarity, ast.Assign) and len(similarity.targets) == 1
            and isinstance(similarity.targets[0], ast.Name) and _similarity_of(similarity.value, {concatenation})):
        return "the statement after the concatenation of the gathered views is not its similarity with itself"
    tensors = {*names, similarity.targets[0].id}
    sizes: set[str] = set()
    aranges = []
    for later in body[index + 1:]:
        for node in _reads(later, set(names)):
            if not _size_of(node, set(names)) and not _device_of(node, set(names)):
                return f"`{dotted(node) or names[0]}` is read after the similarity for more than its size"
        if isinstance(later, ast.Assign) and len(later.targets) == 1 and isinstance(later.targets[0], ast.Name):
            if _gathered_size(later.value, tensors, sizes):
                sizes.add(later.targets[0].id)
            elif later.targets[0].id == similarity.targets[0].id or _reads(later, {similarity.targets[0].id}):
                tensors.add(later.targets[0].id)
        aranges += [sub for sub in ast_walk.walk(later)
                    if isinstance(sub, ast.Call) and last_part(sub.func) == "arange"]
    if (require_labels and not aranges) or not all(
            sub.args and all(_gathered_size(argument, tensors, sizes) for argument in sub.args) for sub in aranges):
        return "the labels (torch.arange) are not sized by the gathered views"
    return None


def _gathered_size(node: ast.expr, tensors: set[str], sizes: set[str]) -> bool:
    """A size of the gathered tensors: `z_i.shape[0]`, a name made from one, and sums,
    differences, products and floor divisions of those with each other or integers."""
    if _size_of(node, tensors) or isinstance(node, ast.Name) and node.id in sizes:
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv)):
        sides = [node.left, node.right]
        sized = [_gathered_size(side, tensors, sizes) for side in sides]
        return any(sized) and all(each or isinstance(side, ast.Constant) and isinstance(side.value, int)
                                  for each, side in zip(sized, sides))
    return False


def _device_of(node: ast.AST, names: set[str]) -> bool:
    return isinstance(node, ast.Attribute) and node.attr in ("device", "dtype") \
        and isinstance(node.value, ast.Name) and node.value.id in names


def _rebound(statement: ast.stmt, gathers: set[str]) -> Optional[list[str]]:
    """[a, b] for `a, b = gather(a), gather(b)` (or `a = gather(a)`), else None."""
    if not isinstance(statement, ast.Assign) or len(statement.targets) != 1:
        return None
    target, value = statement.targets[0], statement.value
    targets = target.elts if isinstance(target, ast.Tuple) else [target]
    values = value.elts if isinstance(value, ast.Tuple) else [value]
    if len(targets) != len(values):
        return None
    names = []
    for each_target, each_value in zip(targets, values):
        if not (isinstance(each_target, ast.Name) and isinstance(each_value, ast.Call)
                and dotted(each_value.func) in gathers and len(each_value.args) == 1
                and isinstance(each_value.args[0], ast.Name) and each_value.args[0].id == each_target.id):
            return None
        names.append(each_target.id)
    return names


def _bound_by(statement: ast.stmt) -> set[str]:
    if not isinstance(statement, ast.Assign):
        return set()
    return {node.id for target in statement.targets for node in ast_walk.walk(target) if isinstance(node, ast.Name)}


def _similarity_of(value: ast.expr, names: set[str]) -> bool:
    """The value multiplies gathered embeddings, and only those, as matrices (`a @ b.T`,
    `scale * a @ b.T`, torch.matmul/mm)."""
    for node in ast_walk.walk(value):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            operands = [node.left, node.right]
        elif isinstance(node, ast.Call) and last_part(node.func) in ("matmul", "mm"):
            operands = list(node.args)
        elif isinstance(node, ast.Call) and last_part(node.func) == "einsum" and node.args \
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str) \
                and re.fullmatch(r"(\w)(\w),(?!\1)(\w)\2->\1\3", node.args[0].value.replace(" ", "")):
            listed = len(node.args) == 2 and isinstance(node.args[1], (ast.List, ast.Tuple))
            operands = list(node.args[1].elts) if listed else list(node.args[1:])  # type: ignore[attr-defined]
        elif isinstance(node, ast.Call) and last_part(node.func) == "cosine_similarity" and len(node.args) >= 2:
            operands = [_unsqueezed(node.args[0], 1), _unsqueezed(node.args[1], 0)]
        else:
            continue
        if len(operands) == 2 and all(_embedding(operand) in names for operand in operands):
            return True
    return False


def _unsqueezed(node: ast.expr, axis: int) -> ast.expr:
    """`x` of `x.unsqueeze(axis)` (cosine_similarity's every row against every row), else a
    node no name matches."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "unsqueeze" \
            and len(node.args) == 1 and isinstance(node.args[0], ast.Constant) and node.args[0].value == axis:
        return node.func.value
    return ast.Constant(None)


def _embedding(operand: ast.expr) -> Optional[str]:
    """`a` of the operand `a`, `a.T`, `a.t()`, `scale * a`, `F.normalize(a, dim=-1)`."""
    if isinstance(operand, ast.BinOp) and isinstance(operand.op, ast.Mult):
        operand = operand.right
    if isinstance(operand, ast.Call) and isinstance(operand.func, ast.Attribute) and operand.func.attr == "t" \
            and not operand.args:
        operand = operand.func.value
    if isinstance(operand, ast.Attribute) and operand.attr in ("T", "mT"):
        operand = operand.value
    if isinstance(operand, ast.Call) and last_part(operand.func) == "normalize" and operand.args:
        operand = operand.args[0]
    return operand.id if isinstance(operand, ast.Name) else None


def _size_of(node: ast.AST, names: set[str]) -> bool:
    """`x.shape[0]`, `x.size(0)` or `len(x)` of one of `names`."""
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "shape":
        return isinstance(node.value.value, ast.Name) and node.value.value.id in names \
            and isinstance(node.slice, ast.Constant) and node.slice.value == 0
    if isinstance(node, ast.Call) and len(node.args) == 1:
        argument = node.args[0]
        if isinstance(node.func, ast.Name) and node.func.id == "len":
            return isinstance(argument, ast.Name) and argument.id in names
        if isinstance(node.func, ast.Attribute) and node.func.attr == "size":
            return isinstance(node.func.value, ast.Name) and node.func.value.id in names \
                and isinstance(argument, ast.Constant) and argument.value == 0
    return False


def _reads(statement: ast.stmt, names: set[str]) -> list[ast.AST]:
    """The outermost reads of `names` in `statement`: a size read whole, else the name."""
    reads: list[ast.AST] = []

    def visit(node: ast.AST) -> None:
        if _size_of(node, names) or _device_of(node, names) or isinstance(node, ast.Name) and node.id in names:
            reads.append(node)
            return
        for child in ast_walk.child_nodes(node):
            visit(child)

    visit(statement)
    return reads
