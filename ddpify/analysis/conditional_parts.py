"""Submodules a model's forward runs only on some calls: under a test on one of forward's
parameters (`if with_aux: return out, self.aux_head(h)`, after an early `if return_features:
return feats`), on a random draw (`if random.random() < self.p_drop:`) or on the mode
alone (`if not self.training:`, a part run in evaluation only). On a step where
the test keeps such a part out of the forward, its parameters get no gradient, and DDP,
waiting for every gradient, fails at the next step unless told to expect unused parameters
(DDP105)."""
from collections.abc import Sequence
from typing import Callable, Optional, Union

import libcst as cst

from ddpify.analysis import traversal
from ddpify.analysis.facts import ConditionalPart
from ddpify.analysis.nodes import dotted_name, find_all

Qualifier = Callable[[cst.BaseExpression], set[str]]
Guard = tuple[Optional[str], cst.BaseExpression, bool]
TRAINING_MODE = "self.training"
_RANDOM_DRAWS = ("random.", "numpy.random.", "torch.rand", "torch.bernoulli", "torch.multinomial")


def conditional_parts(forward: cst.FunctionDef, attributes: set[str], containers: set[str],
                      qualified: Qualifier, methods: Optional[dict[str, cst.FunctionDef]] = None
                      ) -> list[ConditionalPart]:
    """Of `attributes` (submodules __init__ creates), those every read of which in forward
    lies under a test on a parameter of forward or a random draw, or, for `containers` (an
    nn.ModuleDict or nn.ModuleList), is indexed by one (`self.heads[task](h)`: the other
    heads get no gradient on that call); the first such test or index found for each.

    A read in another method of the class that forward calls (`self._aux(h)` under `if
    with_aux:`, the read of `self.aux_head` in `_aux`) counts as a read at that call, under
    the test around the call: `methods` are the class's own methods by name."""
    walk = _Walk(forward, attributes, containers, qualified, methods or {})
    walk.node(forward.body, None)
    found: list[ConditionalPart] = []
    for attribute, seen in walk.guards.items():
        guards = [guard for guard in seen if guard is not None]
        # Read on both sides of one test (`if x.is_cuda and self.ngpu > 1: data_parallel(self.main,
        # ...) else: self.main(x)`), the part runs whichever way the test goes.
        outcomes = {(id(test), runs_when) for _, test, runs_when in guards}
        if guards and len(guards) == len(seen) and not any((key, not runs) in outcomes for key, runs in outcomes):
            found.append(ConditionalPart(attribute, *guards[0]))
    return found


class _Walk:
    """Forward's body in source order, each read of a submodule with the test it runs under."""

    def __init__(self, forward: cst.FunctionDef, attributes: set[str], containers: set[str],
                 qualified: Qualifier, methods: dict[str, cst.FunctionDef]) -> None:
        self.parameters = {param.name.value for param in [*forward.params.params, *forward.params.kwonly_params]}
        self.parameters.discard("self")
        self.methods = {name: method for name, method in methods.items() if method is not forward}
        self.entered: list[str] = []
        self.attributes = attributes
        self.containers = containers
        self.qualified = qualified
        self.guards: dict[str, list[Optional[Guard]]] = {}

    def reason(self, test: cst.BaseExpression) -> Optional[str]:
        """The parameter the test reads, "" for a random draw, "self.training" for a plain
        test of the mode (`if not self.training:`, a part run in evaluation only), None for
        none of these."""
        for name in find_all(test, cst.Name):
            if name.value in self.parameters:
                return name.value
        for call in find_all(test, cst.Call):
            if any(q.startswith(_RANDOM_DRAWS) for q in self.qualified(call.func)):
                return ""
        plain = test.expression if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not) else test
        return TRAINING_MODE if dotted_name(plain) == TRAINING_MODE else self.flag(test)

    def flag(self, test: cst.BaseExpression) -> Optional[str]:
        """`if self.training and self.use_aux:`, `if self.deep_supervision:`: a setting of the
        object (handed to its __init__, or set on it from outside between steps) that
        ddpify cannot read at migration: "self.use_aux". Not a test of whether a part
        exists (`self.downsample is not None`, `if self.norm:`), nor a setting every
        assignment in the class sets to True."""
        if isinstance(test, cst.Comparison) and any(isinstance(c.operator, (cst.Is, cst.IsNot))
                                                    for c in test.comparisons):
            return None
        for read in find_all(test, cst.Attribute):
            if not (isinstance(read.value, cst.Name) and read.value.value == "self"):
                continue
            attribute = read.attr.value
            if attribute == "training" or attribute in self.attributes or attribute in self.containers \
                    or attribute in self.methods:
                continue
            if self.always_true(attribute):
                continue
            return f"self.{attribute}"
        return None

    def always_true(self, attribute: str) -> bool:
        values = [assign.value for method in self.methods.values() for assign in find_all(method.body, cst.Assign)
                  for target in assign.targets if dotted_name(target.target) == f"self.{attribute}"]
        return bool(values) and all(dotted_name(value) == "True" for value in values)

    def picks_an_entry(self, node: cst.Subscript) -> bool:
        """`self.heads[task]`: an entry of a module container picked by a parameter or a draw."""
        container = node.value
        return (isinstance(container, cst.Attribute) and isinstance(container.value, cst.Name)
                and container.value.value == "self" and container.attr.value in self.containers
                and any(self.reason(element.slice.value) is not None for element in node.slice
                        if isinstance(element.slice, cst.Index)))

    def record(self, node: cst.CSTNode, guard: Optional[Guard]) -> None:
        for read in find_all(node, cst.Attribute):
            if isinstance(read.value, cst.Name) and read.value.value == "self" and read.attr.value in self.attributes:
                self.guards.setdefault(read.attr.value, []).append(guard)

    def node(self, node: cst.CSTNode, guard: Optional[Guard]) -> None:
        if isinstance(node, (cst.If, cst.IfExp)):
            self.branches(node, guard)
        elif isinstance(node, cst.IndentedBlock):
            self.block(node.body, guard)
        elif isinstance(node, cst.Attribute):
            self.record(node, guard)
        elif isinstance(node, cst.Call) and self.own_method(node) is not None:
            for child in traversal.children(node):
                self.node(child, guard)
            self.method(self.own_method(node), guard)
        elif isinstance(node, cst.Subscript) and self.picks_an_entry(node):
            self.record(node.value, guard or (self.reason(node) or None, node, True))
            for element in node.slice:
                self.node(element, guard)
        else:
            for child in traversal.children(node):
                self.node(child, guard)

    def own_method(self, call: cst.Call) -> Optional[str]:
        """`self._aux(h)`: a method of the class, not yet being walked."""
        func = call.func
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self" \
                and func.attr.value in self.methods and func.attr.value not in self.entered:
            return func.attr.value
        return None

    def method(self, name: Optional[str], guard: Optional[Guard]) -> None:
        """The called method's body under the call's test. Its own parameters are not
        forward's: a test on one of them is read as no test (the part counts as run)."""
        if name is None:
            return
        parameters, self.parameters = self.parameters, set()
        self.entered.append(name)
        self.node(self.methods[name].body, guard)
        self.entered.pop()
        self.parameters = parameters

    def branches(self, node: Union[cst.If, cst.IfExp], guard: Optional[Guard]) -> None:
        reason = self.reason(node.test)
        self.record(node.test, guard)
        self.node(node.body, guard if reason is None else (reason or None, node.test, True))
        if node.orelse is not None:
            self.node(node.orelse, guard if reason is None else (reason or None, node.test, False))

    def block(self, statements: Sequence[cst.BaseStatement], guard: Optional[Guard]) -> None:
        for statement in statements:
            self.node(statement, guard)
            # After `if test: return ...` (no else), the rest runs only where the test fails.
            if guard is None and isinstance(statement, cst.If) and statement.orelse is None and _leaves(
                    statement.body):
                reason = self.reason(statement.test)
                if reason is not None:
                    guard = (reason or None, statement.test, False)


def _leaves(body: cst.BaseSuite) -> bool:
    if not isinstance(body, cst.IndentedBlock) or not body.body:
        return False
    last = body.body[-1]
    return isinstance(last, cst.SimpleStatementLine) and any(
        isinstance(small, (cst.Return, cst.Raise)) for small in last.body)
