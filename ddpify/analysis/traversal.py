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
    return isinstance(value, cst.CSTNode) or isinstance(value, (tuple, list)) and any(
        isinstance(item, cst.CSTNode) for item in value)


def _fields_of(node: cst.CSTNode) -> tuple[str, ...]:
    known = _FIELDS.get(type(node))
    if known is None:
        order = _visited_fields(node)
        # Unvisited fields that are empty here may be visited where they are set.
        known = _FIELDS[type(node)] = (order, tuple(
            field.name for field in dataclasses.fields(node)
            if field.name not in order and getattr(node, field.name) in (None, (), [])))
    if any(_holds_children(getattr(node, field)) for field in known[1]):
        # A field libcst visits only when it is set (an f-string's format_spec): the first
        # node of the class had none, this one has; its own order, not cached.
        return _visited_fields(node)
    return known[0]


def visit(node: cst.CSTNode, visitor: cst.CSTVisitor) -> None:
    """`node.visit(visitor)` for a visitor that only reads: on_visit (its visit_X), the
    children unless it returned False, then on_leave (its leave_X)."""
    if visitor.on_visit(node):
        for field in _fields_of(node):
            value = getattr(node, field)
            if isinstance(value, cst.CSTNode):
                visit(value, visitor)
            elif isinstance(value, (tuple, list)):
                for child in value:
                    if isinstance(child, cst.CSTNode):
                        visit(child, visitor)
    visitor.on_leave(node)
