"""Names a loop binds and the code after it reads: whether a figure set in an evaluation
loop outlives it (figures.py)."""
from collections.abc import Sequence
from typing import Optional

import libcst as cst

from ddpify.analysis import traversal
from ddpify.analysis.control import Facts
from ddpify.analysis.nodes import names_in, targets_bound_in


def rebound(node: cst.CSTNode) -> set[str]:
    """Names bound as a whole in node (`x = ...`, `x += ...`, `for x in`, `as x`); not a
    table's entries (`counts[k] += 1` leaves `counts` the same object)."""
    return set().union(*(_bound_by(target) for target in targets_bound_in(node)))


def scope_statements(facts: Facts, loop: cst.For) -> Sequence[cst.CSTNode]:
    function = facts.function_of(loop)
    if function is not None:
        return [function.body]
    return [statement for statement in facts.module.body
            if not isinstance(statement, (cst.FunctionDef, cst.ClassDef))]


def names_read_after(facts: Facts, loop: cst.For) -> set[str]:
    """Names read after the loop before anything binds them again, on any path: the rest of
    each block around it up to its function, and for an enclosing loop either the start of
    its next pass or, after its last pass, what follows it. The two are alternatives: a
    name the next pass binds anew (`confusion = [...]` at the top of the epoch) is still read
    by the code after the epoch loop."""
    paths: list[list[cst.CSTNode]] = []
    following: list[cst.CSTNode] = []
    node: cst.CSTNode = loop
    while True:
        block = facts.parents.get(node)
        if not isinstance(block, (cst.IndentedBlock, cst.Module)):
            break
        body: list[cst.CSTNode] = list(block.body)
        index = body.index(node)
        following = following + body[index + 1:]
        owner = facts.parents.get(block)
        if owner is None or isinstance(owner, (cst.FunctionDef, cst.ClassDef)):
            break
        if isinstance(owner, (cst.For, cst.While)):
            paths.append(following + body[:index])
        node = owner
    paths.append(following)
    return set().union(*(_reads_before_rebinding(path) for path in paths))


def _reads_before_rebinding(statements: Sequence[cst.CSTNode], bound: Optional[set[str]] = None) -> set[str]:
    """Names read before a statement of the sequence binds them again. Inside a with or a
    for body the same holds; a binding inside an if may not happen, so it binds nothing."""
    read: set[str] = set()
    bound = set(bound or ())
    for statement in statements:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.Assign):
                    read |= names_in(small.value) - bound
                    for target in small.targets:
                        if not isinstance(target.target, (cst.Name, cst.Tuple, cst.List)):
                            read |= names_in(target.target) - bound
                    bound |= {name for target in small.targets for name in _bound_by(target.target)}
                else:
                    read |= names_in(small) - bound
        elif isinstance(statement, cst.For):
            read |= names_in(statement.iter) - bound
            read |= _reads_before_rebinding(_body_of(statement), bound | _bound_by(statement.target))
        elif isinstance(statement, cst.With):
            for item in statement.items:
                read |= names_in(item.item) - bound
            inner = bound | set().union(set(), *(_bound_by(item.asname.name) for item in statement.items
                                                 if item.asname is not None
                                                 and isinstance(item.asname.name, cst.BaseExpression)))
            read |= _reads_before_rebinding(_body_of(statement), inner)
            bound |= _top_level_bindings(_body_of(statement))
        elif isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            continue
        else:
            read |= names_in(statement) - bound
    return read


def _body_of(statement: cst.CSTNode) -> Sequence[cst.CSTNode]:
    body = getattr(statement, "body", None)
    return list(body.body) if isinstance(body, cst.IndentedBlock) else []


def _top_level_bindings(statements: Sequence[cst.CSTNode]) -> set[str]:
    found: set[str] = set()
    for statement in statements:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.Assign):
                    found |= {name for target in small.targets for name in _bound_by(target.target)}
    return found


def _bound_by(target: cst.BaseExpression) -> set[str]:
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, (cst.Tuple, cst.List)):
        return set().union(*(_bound_by(element.value) for element in target.elements))
    return set()


def in_order(loop: cst.For, names: set[str]) -> list[str]:
    """Names in the order the loop body first mentions them (the gathered tuple's order)."""
    ordered: list[str] = []

    class _Order(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            if node.value in names and node.value not in ordered:
                ordered.append(node.value)

    traversal.visit(loop.body, _Order())
    return ordered
