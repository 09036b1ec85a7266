"""A read-only walk of a libcst tree: the same visitor calls as `node.visit(visitor)`, in the
same order, without libcst's rebuilding.

libcst's `visit` rebuilds every node on the way back up, a visitor that changes nothing
included (its own "TODO: provide traversal where children are not replaced"): on a module
that costs more than parsing it. Reading a tree needs none of that. The children of a node
are its fields in the order libcst's own `_visit_and_replace_children` visits them, learnt
once per node class from that method itself, so that the walk sees what libcst's would.
Attribute hooks (`visit_Call_func`) are not called: no visitor of ddpify defines one.
"""
import dataclasses
from collections.abc import Callable, Iterator

import libcst as cst

# The fields of each node class that hold children, in the order libcst visits them, and
# those it left out because they were empty in the node it was learnt from.
_FIELDS: dict[type, tuple[tuple[str, ...], tuple[str, ...]]] = {}


class _FieldOrder(cst.CSTVisitor):
    """Records the fields `_visit_and_replace_children` visits, without descending."""

    def __init__(self) -> None:
        super().__init__()
        self.fields: list[str] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        return False

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        self.fields.append(attribute)


def _visited_fields(node: cst.CSTNode) -> tuple[str, ...]:
    order = _FieldOrder()
    node._visit_and_replace_children(order)
    return tuple(dict.fromkeys(order.fields))


def _holds_children(value: object) -> bool:
    return is_node(value) or isinstance(value, (tuple, list)) and any(is_node(item) for item in value)


def _fields_of(node: cst.CSTNode) -> tuple[str, ...]:
    known = _FIELDS.get(type(node))
    if known is None:
        order = _visited_fields(node)
        # Unvisited fields that are empty here may be visited where they are set.
        known = _FIELDS[type(node)] = (order, tuple(
            field.name for field in dataclasses.fields(node)
            if field.name not in order and getattr(node, field.name) in (None, (), [])))
    for field in known[1]:
        if _holds_children(getattr(node, field)):
            # A field libcst visits only when it is set (an f-string's format_spec): the
            # first node of the class had none, this one has; its own order, not cached.
            return _visited_fields(node)
    return known[0]


# Whether a class is a libcst node. libcst's node classes are ABCs, so `isinstance(value,
# cst.CSTNode)` runs ABCMeta's Python-level check on every call; children() asks it of every
# field of every node a walk meets, a tenth of a migration before this cache.
_IS_NODE: dict[type, bool] = {}


def is_node(value: object) -> bool:
    """`isinstance(value, cst.CSTNode)`, answered once per class."""
    known = _IS_NODE.get(value.__class__)
    if known is None:
        known = _IS_NODE[value.__class__] = isinstance(value, cst.CSTNode)
    return known


def children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """`node.children`, in the same order, without libcst's visitor run to collect them.
    Every node of a walk passes here: is_node's cache is read inline, and the fields of a
    class with no field left to check are taken without a call."""
    known = _FIELDS.get(node.__class__)
    fields = known[0] if known is not None and not known[1] else _fields_of(node)
    found: list[cst.CSTNode] = []
    for field in fields:
        value = getattr(node, field)
        kind = value.__class__
        if kind is tuple or kind is list:
            for child in value:
                if _IS_NODE.get(child.__class__) or is_node(child):
                    found.append(child)
        elif _IS_NODE.get(kind) or is_node(value):
            found.append(value)
    return found


def visit(node: cst.CSTNode, visitor: cst.CSTVisitor) -> None:
    """`node.visit(visitor)` for a visitor that only reads: on_visit (its visit_X), the
    children unless it returned False, then on_leave (its leave_X)."""
    if visitor.on_visit(node):
        for child in children(node):
            visit(child, visitor)
    visitor.on_leave(node)


def preorder(node: cst.CSTNode, descend: Callable[[cst.CSTNode], bool]) -> Iterator[cst.CSTNode]:
    """The nodes `visit` would visit, in its order (node first), entering the children of
    those `descend` accepts."""
    pending = [node]
    while pending:
        current = pending.pop()
        yield current
        if descend(current):
            pending.extend(reversed(children(current)))
