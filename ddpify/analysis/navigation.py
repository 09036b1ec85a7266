"""Where a node sits: its statement, block, function and loops, and its position."""
from collections.abc import Mapping
from typing import Optional, TypeVar, Union, cast, overload

import libcst as cst

from ddpify.analysis.facts import Block, BlockItem, FactRecord, Statement
from ddpify.analysis.nodes import first_free

_Kind = TypeVar("_Kind", bound=cst.CSTNode)
_StatementKind = TypeVar("_StatementKind", bound=Union[cst.BaseSmallStatement, cst.BaseCompoundStatement])


def ancestors_up_to(parents: Mapping[cst.CSTNode, cst.CSTNode], node: cst.CSTNode,
                    stop: Optional[cst.CSTNode]) -> list[cst.CSTNode]:
    """The nodes around `node`, innermost first, up to (not including) `stop` (None: the module)."""
    found: list[cst.CSTNode] = []
    current = parents.get(node)
    while current is not None and current is not stop:
        found.append(current)
        current = parents.get(current)
    return found


class Navigation(FactRecord):
    def nodes_of(self, kind: type[_Kind]) -> list[_Kind]:
        """Every node of exactly this type in the module, in source order: what
        `find_all(module, kind)` gives for a concrete libcst class, without a walk."""
        return cast(list[_Kind], self.nodes_by_type.get(kind, []))

    def own_statements(self, function: Optional[cst.FunctionDef], kind: type[_StatementKind]) -> list[_StatementKind]:
        """The statements of exactly this type in the function's own body, not in functions
        defined inside it (at module level, None: those of no function), in source order:
        `find_all(function.body, kind, into_functions=False)` without a walk."""
        return cast(list[_StatementKind], self.statements_by_function.get((function, kind), []))

    def free_name(self, name: str) -> str:
        """`name`, or `name_`, `name__`, ...: the first the script does not bind."""
        return first_free(name, self.bound_names.__contains__)

    def line_of(self, node: cst.CSTNode) -> int:
        return self.positions[node].start.line

    def column_of(self, node: cst.CSTNode) -> int:
        return self.positions[node].start.column + 1

    def function_of(self, node: cst.CSTNode) -> Optional[cst.FunctionDef]:
        """The innermost function around a node; None at module level."""
        parent: Optional[cst.CSTNode] = self.parents.get(node)
        while parent is not None and not isinstance(parent, cst.FunctionDef):
            parent = self.parents.get(parent)
        return parent

    def call_taking(self, node: cst.CSTNode) -> Optional[cst.Call]:
        """The call `node` is an argument of (`iter(DataLoader(...))`, `fit(model,
        DataLoader(...))`); None when it is no argument."""
        arg = self.parents.get(node)
        around = self.parents.get(arg) if isinstance(arg, cst.Arg) else None
        return around if isinstance(around, cst.Call) else None

    def statement_of(self, node: cst.CSTNode) -> Statement:
        """The statement that holds a node (the node itself if it is one)."""
        while not isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            node = self.parents[node]
        return node

    @overload
    def ancestor_in(self, node: cst.CSTNode, block: Block) -> Optional[Statement]: ...

    @overload
    def ancestor_in(self, node: cst.CSTNode, block: cst.BaseSuite) -> Optional[BlockItem]: ...

    @overload
    def ancestor_in(self, node: cst.CSTNode, block: cst.CSTNode) -> Optional[cst.CSTNode]: ...

    def ancestor_in(self, node: cst.CSTNode, block: cst.CSTNode) -> Optional[cst.CSTNode]:
        """The statement directly in `block` (a Module or IndentedBlock) that holds node.

        Any other block gives the child of it that holds node (the overloads say which)."""
        current: Optional[cst.CSTNode] = node
        while current is not None:
            parent = self.parents.get(current)
            if parent is block:
                return current
            current = parent
        return None

    def block_of(self, statement: Statement) -> Block:
        # A statement's parent is the module or an indented block: a one-line suite holds
        # small statements only.
        return cast(Block, self.parents[statement])

    def start_of(self, node: cst.CSTNode) -> tuple[int, int]:
        start = self.positions[node].start
        return start.line, start.column

    def end_of(self, node: cst.CSTNode) -> tuple[int, int]:
        end = self.positions[node].end
        return end.line, end.column

    def within_a_loop(self, node: cst.CSTNode) -> bool:
        """A for or while loop of the node's own function (or of the module) holds it,
        header included (rules/checkpoints.py's `_in_loop` counts loop bodies alone)."""
        parent = self.parents.get(node)
        while parent is not None and not isinstance(parent, cst.FunctionDef):
            if isinstance(parent, (cst.For, cst.While)):
                return True
            parent = self.parents.get(parent)
        return False

    def enclosing_loops(self, node: cst.CSTNode) -> list[cst.For]:
        """For loops whose body (not header) holds node, innermost first, up to the function."""
        return [loop for loop in self.enclosing_for_and_while_loops(node) if isinstance(loop, cst.For)]

    def enclosing_for_and_while_loops(self, node: cst.CSTNode) -> list[Union[cst.For, cst.While]]:
        """For and while loops whose body (not header or test) holds node, innermost first, up to
        the function (`while epoch < args.epochs:` is an epoch loop too)."""
        loops: list[Union[cst.For, cst.While]] = []
        child: cst.CSTNode = node
        parent = self.parents.get(node)
        while parent is not None and not isinstance(parent, cst.FunctionDef):
            if isinstance(parent, (cst.For, cst.While)) and child is parent.body:
                loops.append(parent)
            child, parent = parent, self.parents.get(parent)
        return loops
