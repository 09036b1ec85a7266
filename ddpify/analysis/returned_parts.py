"""Which submodules feed each output of a forward that returns several (`return validity,
code` of a discriminator with an auxiliary head, `return self.classifier(h), self.decoder(h)`).

A training step that keeps only some of them (`validity, _ = discriminator(fake)`,
`logits = model(x)[0]`) leaves the submodules that feed only the outputs it drops without a
gradient, and DDP, waiting for every gradient, fails at the next step unless told to expect
unused parameters (DDP105). The flow is followed by names, in source order, through
forward's body (both branches of a test joined), and into the class's own methods that
forward calls (`self._head(h)` reads what `_head` reads); a part read by every output is
never counted as dropped.
"""
from collections.abc import Sequence
from typing import Optional, Union

import libcst as cst

from ddpify.analysis.nodes import find_all, returns_in, self_reads

# An output's place in forward's result: its index in a returned tuple, or its key in a
# returned dict literal.
OutputKey = Union[int, str]


def returned_parts(forward: cst.FunctionDef, submodules: set[str],
                   methods: dict[str, cst.FunctionDef]) -> dict[OutputKey, frozenset[str]]:
    """For a forward whose every return is a tuple of one length (or a dict literal of the
    same string keys), the submodules (of `submodules`) each output is computed from; empty
    where forward returns one value, or results of other shapes."""
    shapes = [_output_values(ret.value) for ret in returns_in(forward)]
    if not shapes or any(shape is None for shape in shapes):
        return {}
    keys = set(shapes[0] or {})
    if len(keys) < 2 or any(set(shape or {}) != keys for shape in shapes):
        return {}
    flow = _Flow(submodules, {name: method for name, method in methods.items() if method is not forward})
    flow.block(forward.body)
    parts: dict[OutputKey, frozenset[str]] = {}
    for shape in shapes:
        for key, value in (shape or {}).items():
            parts[key] = parts.get(key, frozenset()) | flow.parts_of(value)
    return parts


def _output_values(value: Optional[cst.BaseExpression]) -> Optional[dict[OutputKey, cst.BaseExpression]]:
    if isinstance(value, cst.Tuple):
        if any(isinstance(element, cst.StarredElement) for element in value.elements):
            return None
        return {index: element.value for index, element in enumerate(value.elements)}
    if isinstance(value, cst.Dict):
        found: dict[OutputKey, cst.BaseExpression] = {}
        for element in value.elements:
            if not isinstance(element, cst.DictElement) or not isinstance(element.key, cst.SimpleString):
                return None
            found[element.key.evaluated_value if isinstance(element.key.evaluated_value, str) else ""] = element.value
        return found
    return None


class _Flow:
    """The submodules each local name of forward is computed from, statement by statement
    (a name rebound in a branch keeps what it held before as well: both paths joined)."""

    def __init__(self, submodules: set[str], methods: dict[str, cst.FunctionDef]) -> None:
        self.submodules = submodules
        self.methods = methods
        self.names: dict[str, frozenset[str]] = {}
        self.in_branch = False

    def parts_of(self, node: cst.CSTNode) -> frozenset[str]:
        found: set[str] = set()
        for name in find_all(node, cst.Name):
            found |= self.names.get(name.value, frozenset())
        for attribute in find_all(node, cst.Attribute):
            if isinstance(attribute.value, cst.Name) and attribute.value.value == "self":
                found |= self._attribute_parts(attribute.attr.value)
        return frozenset(found)

    def _attribute_parts(self, attribute: str) -> frozenset[str]:
        if attribute in self.submodules:
            return frozenset({attribute})
        method = self.methods.get(attribute)
        if method is None:
            return frozenset()
        return frozenset(read for read, _ in self_reads(method) if read in self.submodules)

    def bind(self, target: cst.BaseExpression, parts: frozenset[str]) -> None:
        if isinstance(target, (cst.Subscript, cst.Attribute)):
            # `outputs[k] = ...`, `state.h = ...`: adds to what the base holds
            for name in find_all(target, cst.Name):
                self.names[name.value] = self.names.get(name.value, frozenset()) | parts
            return
        for name in find_all(target, cst.Name):
            before = self.names.get(name.value, frozenset()) if self.in_branch else frozenset()
            self.names[name.value] = before | parts

    def block(self, body: cst.BaseSuite) -> None:
        statements: Sequence[Union[cst.BaseStatement, cst.BaseSmallStatement]] = (
            body.body if isinstance(body, (cst.IndentedBlock, cst.SimpleStatementSuite)) else ())
        for statement in statements:
            self.statement(statement)

    def statement(self, statement: Union[cst.BaseStatement, cst.BaseSmallStatement]) -> None:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                self.statement(small)
        elif isinstance(statement, cst.Assign):
            parts = self.parts_of(statement.value)
            for target in statement.targets:
                self.bind(target.target, parts)
        elif isinstance(statement, (cst.AugAssign, cst.AnnAssign)) and statement.value is not None:
            parts = self.parts_of(statement.value)
            if isinstance(statement, cst.AugAssign):
                parts |= self.parts_of(statement.target)
            self.bind(statement.target, parts)
        elif isinstance(statement, (cst.For, cst.While, cst.If, cst.With, cst.Try)):
            if isinstance(statement, cst.For):
                self.bind(statement.target, self.parts_of(statement.iter))
            was, self.in_branch = self.in_branch, True
            for _ in range(2 if isinstance(statement, (cst.For, cst.While)) else 1):  # a loop feeds itself
                for suite in _suites(statement):
                    self.block(suite)
            self.in_branch = was


def _suites(statement: cst.BaseCompoundStatement) -> list[cst.BaseSuite]:
    suites = [statement.body]
    orelse = getattr(statement, "orelse", None)
    while orelse is not None:
        suites.append(orelse.body)
        orelse = getattr(orelse, "orelse", None) if isinstance(orelse, cst.If) else None
    if isinstance(statement, cst.Try):
        suites += [handler.body for handler in statement.handlers]
        if statement.finalbody is not None:
            suites.append(statement.finalbody.body)
    return suites
