"""The positions of a module's nodes, as libcst's PositionProvider gives them, at a third of its cost.

PositionProvider prints the whole module with a codegen state that records where each node
starts and ends. Most of its time goes to bookkeeping around the print, not the print: a
regular-expression split of every token, a `contextlib` generator for each of the many
`record_syntactic_position` blocks, a CodeRange (two CodePositions) built for every node and
a `CSTNode.__hash__` call per lookup. This state does the same bookkeeping with plain tuples
keyed by the nodes' ids (the tree outlives the mapping, so an id names one node), a newline
test before any split, and a slotted context manager; a CodeRange is built only for the few
nodes the rules ask about. tests/test_inert.py holds the result to PositionProvider's.
"""
import re
from collections.abc import Iterator, Mapping
from typing import Optional

import libcst as cst
from libcst._nodes.internal import CodegenState
from libcst.metadata import CodePosition, CodeRange

# What libcst's position state counts as a line break in a token (its NEWLINE_RE).
_NEWLINES = re.compile(r"\r\n?|\n")

# (start line, start column, end line, end column) of a node.
_Span = tuple[int, int, int, int]


class _SyntacticPosition:
    """`record_syntactic_position` as PositionProvidingCodegenState has it: the node's range is
    what its block printed, unless a child's start or end stands for it (a node whose
    whitespace is not its own)."""

    __slots__ = ("state", "node", "start_node", "end_node", "line", "column")

    def __init__(self, state: "_PositionState", node: cst.CSTNode,
                 start_node: Optional[cst.CSTNode], end_node: Optional[cst.CSTNode]) -> None:
        self.state, self.node, self.start_node, self.end_node = state, node, start_node, end_node
        self.line = self.column = 0

    def __enter__(self) -> None:
        self.line, self.column = self.state.line, self.state.column

    def __exit__(self, *_exception: object) -> None:
        state = self.state
        spans = state.spans
        start_line, start_column = self.line, self.column
        end_line, end_column = state.line, state.column
        if self.start_node is not None:
            start_line, start_column = spans[id(self.start_node)][:2]
        if self.end_node is not None:
            end_line, end_column = spans[id(self.end_node)][2:]
        spans[id(self.node)] = (start_line, start_column, end_line, end_column)


class _PositionState(CodegenState):
    """PositionProvidingCodegenState's positions, kept as tuples by node id."""

    __slots__ = ("line", "column", "spans", "_starts")

    def __init__(self, module: cst.Module) -> None:
        super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
        self.line = 1  # one-indexed
        self.column = 0  # zero-indexed
        self.spans: dict[int, _Span] = {}
        self._starts: list[tuple[int, int]] = []

    def add_indent_tokens(self) -> None:
        for token in self.indent_tokens:
            self.add_token(token)

    def add_token(self, value: str) -> None:
        self.tokens.append(value)
        if "\n" in value or "\r" in value:
            segments = _NEWLINES.split(value)
            self.line += len(segments) - 1
            self.column = len(segments[-1])
        else:
            self.column += len(value)

    def before_codegen(self, node: cst.CSTNode) -> None:
        self._starts.append((self.line, self.column))

    def after_codegen(self, node: cst.CSTNode) -> None:
        start_line, start_column = self._starts.pop()
        # A range recorded by record_syntactic_position (inside the node's codegen) stands.
        key = id(node)
        if key not in self.spans:
            self.spans[key] = (start_line, start_column, self.line, self.column)

    # libcst types it as a generator-based context manager; nodes only enter and exit it.
    def record_syntactic_position(  # type: ignore[override]
            self, node: cst.CSTNode, *, start_node: Optional[cst.CSTNode] = None,
            end_node: Optional[cst.CSTNode] = None) -> _SyntacticPosition:
        return _SyntacticPosition(self, node, start_node, end_node)


class Positions(Mapping[cst.CSTNode, CodeRange]):
    """PositionProvider's mapping for `module`, computed when first asked: a module with
    nothing to change or report never asks."""

    def __init__(self, module: cst.Module) -> None:
        self._module = module
        self._spans: Optional[dict[int, _Span]] = None
        self._nodes: dict[int, cst.CSTNode] = {}

    def _resolved(self) -> dict[int, _Span]:
        if self._spans is None:
            state = _PositionState(self._module)
            self._module._codegen(state)
            self._spans = state.spans
        return self._spans

    def __getitem__(self, node: cst.CSTNode) -> CodeRange:
        start_line, start_column, end_line, end_column = self._resolved()[id(node)]
        return CodeRange(CodePosition(start_line, start_column), CodePosition(end_line, end_column))

    def __iter__(self) -> Iterator[cst.CSTNode]:
        spans = self._resolved()
        if len(self._nodes) != len(spans):
            self._nodes = {id(node): node for node in _all_nodes(self._module)}
        return (self._nodes[key] for key in spans)

    def __len__(self) -> int:
        return len(self._resolved())


def _all_nodes(module: cst.Module) -> Iterator[cst.CSTNode]:
    stack: list[cst.CSTNode] = [module]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(node.children)
