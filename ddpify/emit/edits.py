"""The plan every transform writes into, and the single pass that carries it out.

Transforms never rewrite the tree themselves: they key edits by the original nodes that
analysis recorded, and `ApplyEdits` visits the same tree once. One pass keeps node identity
(libcst makes new nodes on every pass) and keeps the cost near one parse + one print.
"""
import functools
from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Union, cast

import libcst as cst

from ddpify.analysis import memo
from ddpify.analysis.control import Facts
from ddpify.analysis.facts import BlockItem, Statement
from ddpify.analysis.nodes import find_all, statements_in, within
from ddpify.diagnostics import Diagnostic, rule_of
from ddpify.emit import printing
from ddpify.emit.imports import ImportSpec, import_block, imports_of
from ddpify.options import Options

# A rewrite of one node: it receives the updated node of the key's own type (a Call for a
# Call), which a dict of them cannot say, hence Any.
Rewrite = Callable[[Any], cst.CSTNode]


# Given an expression as updated: the lines that compute it before its statement, and what
# stands in its place (Edits.hoisted).
Hoist = Callable[[Any], tuple[list[Statement], cst.CSTNode]]



# The same templates (the helpers every migrated file gets, the setup block) are parsed for
# file after file: a twentieth of a migration's time. libcst trees never change, so one parse
# serves every migration; within one migration each template's statements are handed out
# once, and a second request parses anew, so that no two places of one output share a node
# (the rules key their edits by node).
@functools.lru_cache(maxsize=512)
def _parsed_template(code: str, config: cst.PartialParserConfig) -> cst.Module:
    return cst.parse_module(code, config=config)


_TEMPLATES_TAKEN: dict[str, bool] = memo.per_migration_store()

@dataclass
class Insertion:
    statements: list[Statement]
    # The inserted code takes over the anchor's leading comments and blank lines, so that a
    # comment written above `loader = DataLoader(...)` stays above the code that builds it.
    takes_comments: bool = False
    # The inserted code takes over only the blank lines above the anchor, leaving the
    # anchor's own comments with it: a block inserted between two paragraphs.
    takes_blank_lines: bool = False


@dataclass
class Edits:
    facts: Facts
    config: cst.PartialParserConfig
    options: Options = Options()
    expressions: dict[cst.CSTNode, Rewrite] = field(default_factory=dict)
    # Expressions rewritten to code that names nothing of the setup ("cuda:0" -> "cuda"):
    # the setup need not come before them.
    standalone: set[cst.CSTNode] = field(default_factory=set)
    # Keyed by the statements of the original tree; ApplyEdits rebuilds the module and
    # indented blocks, so a key from a one-line suite (a small statement) is never applied.
    before: dict[BlockItem, list[Insertion]] = field(default_factory=dict)
    after: dict[BlockItem, list[Statement]] = field(default_factory=dict)
    replaced: dict[BlockItem, list[Statement]] = field(default_factory=dict)
    removed: set[BlockItem] = field(default_factory=set)
    guarded: dict[BlockItem, str] = field(default_factory=dict)
    # A small statement of a one-line suite (`except ImportError: ok = False; print(msg)`) to
    # run under a guard: its suite becomes an indented block, a line per small statement, as
    # the same code written over several lines would be.
    guarded_in_suites: dict[cst.BaseSmallStatement, str] = field(default_factory=dict)
    # A small statement that goes from a line it shares with others (`G.cuda(); G =
    # nn.DataParallel(G)`): the others stay on that line, edited as planned.
    removed_from_lines: set[cst.BaseSmallStatement] = field(default_factory=set)
    # Statements wrapped in try/finally, with the code for the finally block.
    finally_bodies: dict[BlockItem, list[Statement]] = field(default_factory=dict)
    module_end: list[Statement] = field(default_factory=list)
    module_prelude: list[Statement] = field(default_factory=list)
    # Keys of names.EMITTED_IMPORTS the emitted code uses.
    imports: set[str] = field(default_factory=set)
    # (module, name, alias) imports to drop if the migrated code no longer uses them.
    unused_imports: set[ImportSpec] = field(default_factory=set)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    # Helper functions already added to module_prelude, by name.
    helpers_added: set[str] = field(default_factory=set)
    # An expression computed on lines of their own just before its statement, under the same
    # guard (`state = model.state_dict()`): given the expression as updated, those lines and
    # what stands in its place. Its statement is a line of an indented block or of the module.
    hoisted: dict[cst.CSTNode, Hoist] = field(default_factory=dict)

    def statement(self, code: str) -> Statement:
        return cst.parse_statement(code, config=self.config)

    def statements(self, code: str) -> list[Statement]:
        """The statements of a template; a comment above the first one stays above it (libcst
        would keep it in the parsed module's header)."""
        if code in _TEMPLATES_TAKEN:
            module = cst.parse_module(code, config=self.config)
        else:
            _TEMPLATES_TAKEN[code] = True
            module = _parsed_template(code, self.config)
        body = list(module.body)
        if module.header and body:
            body[0] = body[0].with_changes(leading_lines=[*module.header, *body[0].leading_lines])
        return body

    def expression(self, code: str) -> cst.BaseExpression:
        return cst.parse_expression(code, config=self.config)

    def code(self, node: cst.CSTNode) -> str:
        return printing.code_for_node(self.facts.module, node)

    def code_edited(self, node: cst.CSTNode) -> str:
        """The code of `node` with the expression rewrites already planned inside it applied:
        for a node rebuilt from its text (a loader's arguments), so that the edit of a part of
        it (`num_workers=os.cpu_count()` shared among the ranks) is not lost with the node."""
        expressions = self.expressions
        if not any(inner in expressions for inner in within(node)[1:]):
            return self.code(node)  # nothing planned inside it

        class _Rewrite(cst.CSTTransformer):
            def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode  # type: ignore[override]
                         ) -> cst.CSTNode:
                rewrite = expressions.get(original_node)
                return updated_node if rewrite is None or original_node is node else rewrite(updated_node)

        return self.code(cast(cst.CSTNode, node.visit(_Rewrite())))

    def add_helper(self, name: str, code: str, *imports: str) -> None:
        """A small function the emitted code calls, once, above the module's code, with the
        names.EMITTED_IMPORTS keys it uses."""
        self.imports.update(imports)
        if name in self.helpers_added:
            return
        self.helpers_added.add(name)
        helper = self.statements(code)
        # Two blank lines above a top-level def, as PEP 8 and black have it.
        helper[0] = helper[0].with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
        self.module_prelude.extend(helper)

    def report(self, code: str, node: cst.CSTNode, message: Optional[str] = None) -> Diagnostic:
        """Record a diagnostic at a node of the original tree; the rule may keep it in the
        plan when another rule decides by it."""
        position = self.facts.positions[node]
        diagnostic = Diagnostic(code, position.start.line, position.start.column + 1,
                                message or rule_of(code).summary, position.end.line)
        self.diagnostics.append(diagnostic)
        return diagnostic

    def insert_before(self, node: BlockItem, insertion: Insertion, *, first: bool = False) -> None:
        """Statements above `node`, after those other rules put there (or before them all)."""
        insertions = self.before.setdefault(node, [])
        if first:
            insertions.insert(0, insertion)
        else:
            insertions.append(insertion)

    def insert_after(self, node: BlockItem, statements: Sequence[Statement], *, first: bool = False) -> None:
        """Statements below `node`, after those other rules put there (or before them all)."""
        after = self.after.setdefault(node, [])
        if first:
            after[0:0] = statements
        else:
            after.extend(statements)

    def replace(self, node: BlockItem, statements: Sequence[Statement]) -> None:
        """`node` replaced by these statements (one rule per statement: see test_rule_clashes)."""
        self.replaced[node] = list(statements)

    def edited_nodes(self, include_guarded: bool = True) -> list[cst.CSTNode]:
        """The nodes emitted code sits beside, replaces or guards (not those only removed): the
        setup block must come before the first of them that runs. `include_guarded=False`
        leaves out the rank-0 guards, which need the guard's name but not the group."""
        nodes: list[cst.CSTNode] = [*self.before, *self.after, *self.replaced, *self.guarded, *self.hoisted,
                                    *(node for node in self.expressions if node not in self.standalone)]
        return nodes if include_guarded else [node for node in nodes if node not in self.guarded]

    def edits_any(self, statements: Iterable[cst.CSTNode]) -> bool:
        """Whether an edit already claims one of these statements, so that a rule that would
        restructure them (no_sync's `with` around a micro-batch) leaves them as they are."""
        claimed: list[Container[cst.CSTNode]] = [self.before, self.after, self.removed, self.replaced,
                                                 self.guarded]
        return any(statement in edits for statement in statements for edits in claimed)

    @property
    def changes_anything(self) -> bool:
        return bool(
            self.expressions or self.before or self.after or self.replaced or self.removed
            or self.guarded or self.finally_bodies or self.module_end or self.module_prelude
            or self.guarded_in_suites or self.hoisted or self.removed_from_lines
        )


def replacement(edits: Edits, code: str) -> Rewrite:
    """A rewrite that puts `code` in the node's place, parsed when the edits are applied."""
    return lambda _node: edits.expression(code)


class ApplyEdits(cst.CSTTransformer):
    def __init__(self, edits: Edits) -> None:
        super().__init__()
        self.edits = edits
        # Only nodes on the way to an edit are visited: the rest of the tree is left as
        # it is, which keeps this pass cheap on long files with few edits.
        self.on_path: set[cst.CSTNode] = set()
        # The lines of hoisted expressions, by the original statement they go before.
        self.hoisted_lines: dict[cst.CSTNode, list[Statement]] = {}
        for key in (*edits.expressions, *edits.before, *edits.after, *edits.replaced, *edits.hoisted,
                    *edits.removed, *edits.guarded, *edits.finally_bodies, *edits.guarded_in_suites,
                    *edits.removed_from_lines):
            node: Optional[cst.CSTNode] = key
            while node is not None and node not in self.on_path:
                self.on_path.add(node)
                node = edits.facts.parents.get(node)

    def on_visit(self, node: cst.CSTNode) -> bool:
        return (node in self.on_path or isinstance(node, cst.Module)) and super().on_visit(node)

    # libcst types on_leave as returning the kind of node it was given; a rewrite may put
    # another kind in its place (a Name for an Attribute), which that signature cannot say.
    def on_leave(  # type: ignore[override]
        self, original_node: cst.CSTNode, updated_node: cst.CSTNode
    ) -> Union[cst.CSTNode, cst.RemovalSentinel, cst.FlattenSentinel[cst.CSTNode]]:
        rewrite = self.edits.expressions.get(original_node)
        if rewrite is not None:
            updated_node = rewrite(updated_node)
        hoist = self.edits.hoisted.get(original_node)
        if hoist is not None:
            lines, updated_node = hoist(updated_node)
            self.hoisted_lines.setdefault(self.edits.facts.statement_of(original_node), []).extend(lines)
        return super().on_leave(original_node, updated_node)

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock,
                            updated_node: cst.IndentedBlock) -> cst.IndentedBlock:
        return updated_node.with_changes(
            body=self._rebuild(statements_in(original_node), statements_in(updated_node)))

    def leave_SimpleStatementLine(self, original_node: cst.SimpleStatementLine,
                                  updated_node: cst.SimpleStatementLine) -> cst.SimpleStatementLine:
        return updated_node.with_changes(body=self._kept_small_statements(original_node.body, updated_node.body))

    def _kept_small_statements(self, originals: Sequence[cst.BaseSmallStatement],
                               updated: Sequence[cst.BaseSmallStatement]) -> list[cst.BaseSmallStatement]:
        """The small statements of a line but those removed_from_lines takes out (never all of
        them), the last without a semicolon after it."""
        removed = self.edits.removed_from_lines
        if not any(small in removed for small in originals):
            return list(updated)
        kept = [new for original, new in zip(originals, updated) if original not in removed] or list(updated)
        kept[-1] = kept[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
        return kept

    def leave_SimpleStatementSuite(self, original_node: cst.SimpleStatementSuite,
                                   updated_node: cst.SimpleStatementSuite) -> cst.BaseSuite:
        """A one-line suite holding a guarded small statement, as an indented block: each
        small statement on its own line, the guarded ones under their guard."""
        updated_node = updated_node.with_changes(
            body=self._kept_small_statements(original_node.body, updated_node.body))
        if not any(small in self.edits.guarded_in_suites for small in original_node.body):
            return updated_node
        out = _GuardedBody(self.edits)
        for line, guard in self._lines_of(original_node.body, updated_node.body):
            out.place([line], guard)
        return cst.IndentedBlock(body=out.finish(), header=updated_node.trailing_whitespace)

    def _lines_of(self, originals: Sequence[cst.BaseSmallStatement], updated: Sequence[cst.BaseSmallStatement]
                  ) -> list[tuple[Statement, Optional[str]]]:
        """Small statements that shared a line, each on a line of its own, with its guard
        (None: every rank runs it)."""
        return [(cst.SimpleStatementLine(body=[new.with_changes(semicolon=cst.MaybeSentinel.DEFAULT)]),
                 self.edits.guarded_in_suites.get(original)) for original, new in zip(originals, updated)]

    def _split_pieces(self, original: Statement, new: Statement) -> Optional[list[tuple[Statement, Optional[str]]]]:
        """`value = loss.item(); print(value)` with its print guarded: one line per statement,
        each with its guard (None: every rank runs it), the line's comments above the first and
        its trailing comment after the last; None for any other statement."""
        if not (isinstance(original, cst.SimpleStatementLine) and isinstance(new, cst.SimpleStatementLine)
                and len(original.body) > 1 and len(new.body) == len(original.body)
                and any(small in self.edits.guarded_in_suites for small in original.body)):
            return None
        pieces = self._lines_of(original.body, new.body)
        first, guard = pieces[0]
        pieces[0] = (first.with_changes(leading_lines=new.leading_lines), guard)
        last, guard = pieces[-1]
        pieces[-1] = (last.with_changes(trailing_whitespace=new.trailing_whitespace), guard)
        return pieces

    def leave_If(self, original_node: cst.If, updated_node: cst.If) -> cst.If:
        """`if step % 10 == 0:` around guarded code only becomes `if step % 10 == 0 and is_main:`."""
        guard = self._sole_guard(original_node)
        if guard is None:
            return updated_node
        # The body is indented (_sole_guard checked), and leave_IndentedBlock made all of it,
        # under this one guard, into a single `if guard:` (_guard).
        block = cast(cst.IndentedBlock, updated_node.body)
        inner = cast(cst.If, block.body[0])
        body = list(cast(cst.IndentedBlock, inner.body).body)
        body[0] = body[0].with_changes(leading_lines=inner.leading_lines)
        combined = _and_guard(updated_node.test, guard, self.edits)
        return updated_node.with_changes(test=combined, body=block.with_changes(body=body))

    def _sole_guard(self, node: cst.If) -> Optional[str]:
        if node.orelse is not None or not isinstance(node.body, cst.IndentedBlock):
            return None
        guards = {self.edits.guarded.get(statement) for statement in node.body.body}
        if len(guards) != 1 or None in guards:
            return None
        if any(statement in self.edits.before or statement in self.edits.after
               for statement in node.body.body):
            return None
        return guards.pop()

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        body = self._rebuild(original_node.body, updated_node.body)
        prelude = _called_helpers(self.edits.module_prelude, [*body, *self.edits.module_end])
        if prelude:
            end = _end_of_imports(body)
            following = body[end:]
            if following:
                following[0] = _two_blank_lines_above(following[0])
            if end == 0:  # nothing above: the imports the helpers need go first, then them
                prelude = [prelude[0].with_changes(leading_lines=[]), *prelude[1:]]
            body = body[:end] + prelude + following
        return updated_node.with_changes(body=body + list(self.edits.module_end))

    def _replacement(self, original: Statement, new: Statement
                     ) -> tuple[list[Statement], Optional[list[Optional[str]]]]:
        """What stands in the statement's place: its hoisted lines, then the statement (or what
        replaces it). Where a line of several statements is split (_split_pieces), also the
        guard of each line (None: every rank runs it); None otherwise."""
        edits = self.edits
        hoisted = self.hoisted_lines.pop(original, [])
        pieces = None if original in edits.replaced or original in edits.finally_bodies \
            else self._split_pieces(original, new)
        if pieces is None:
            return _after_hoisted(hoisted, list(edits.replaced.get(original, [new]))), None
        return (_after_hoisted(hoisted, [piece for piece, _ in pieces]),
                [None] * len(hoisted) + [guard for _, guard in pieces])

    def _rebuild(self, originals: Sequence[Statement], updated: Sequence[Statement]) -> list[Statement]:
        edits = self.edits
        out = _GuardedBody(edits)
        carried_blank_lines: list[cst.EmptyLine] = []
        for original, new in zip(originals, updated):
            replacement, line_guards = self._replacement(original, new)
            if original in edits.finally_bodies:
                replacement = [_try_finally(new, edits.finally_bodies[original], edits)]
            for insertion in edits.before.get(original, ()):
                out.extend(_inserted(insertion, replacement))
            if original in edits.removed:
                # Keep the paragraph break that stood above the removed statement.
                blanks, _ = _split_blank_lines(new.leading_lines)
                if blanks and original is not originals[-1]:
                    carried_blank_lines = blanks
                # What goes after it (a DDP wrap after the DataParallel branch it replaces)
                # goes where it stood.
                out.extend(edits.after.get(original, ()))
                continue
            if carried_blank_lines and replacement and not _split_blank_lines(replacement[0].leading_lines)[0]:
                replacement[0] = replacement[0].with_changes(
                    leading_lines=carried_blank_lines + list(replacement[0].leading_lines))
            carried_blank_lines = []
            guard = edits.guarded.get(original)
            if line_guards is not None and guard is None:
                for line, line_guard in zip(replacement, line_guards):
                    out.place([line], line_guard)
            else:
                out.place(replacement, guard)
            if original in edits.after:
                out.extend(edits.after[original])
        return out.finish()


class _GuardedBody:
    """The statements of a rebuilt block, in order; consecutive guarded ones with the same
    guard share one `if guard:`."""

    def __init__(self, edits: Edits) -> None:
        self.edits = edits
        self.body: list[Statement] = []
        self.group: list[Statement] = []
        self.guard: Optional[str] = None

    def place(self, lines: Sequence[Statement], guard: Optional[str]) -> None:
        if guard is None:
            self.extend(lines)
            return
        if self.group and guard != self.guard:
            self.flush()
        self.group.extend(lines)
        self.guard = guard

    def extend(self, lines: Sequence[Statement]) -> None:
        """Lines every rank runs: after the guarded group before them."""
        self.flush()
        self.body.extend(lines)

    def flush(self) -> None:
        if self.group:
            assert self.guard is not None  # a group is only ever gathered under a guard
            self.body.append(_guard(self.group, self.guard, self.edits))
        self.group, self.guard = [], None

    def finish(self) -> list[Statement]:
        self.flush()
        return self.body


def _after_hoisted(hoisted: list[Statement], replacement: list[Statement]) -> list[Statement]:
    """The lines of the statement's hoisted expressions (Edits.hoisted), then the statement:
    the hoisted lines take over the comments above it."""
    if not hoisted or not replacement:
        return replacement
    hoisted[0] = hoisted[0].with_changes(leading_lines=replacement[0].leading_lines)
    return [*hoisted, replacement[0].with_changes(leading_lines=()), *replacement[1:]]


def _inserted(insertion: Insertion, replacement: list[Statement]) -> list[Statement]:
    """The inserted statements, with the comments or blank lines they take over from the
    statement they go above (`replacement[0]`, changed in place)."""
    inserted = list(insertion.statements)
    if insertion.takes_comments and replacement:
        inserted[0] = inserted[0].with_changes(leading_lines=replacement[0].leading_lines)
        replacement[0] = replacement[0].with_changes(leading_lines=())
    elif insertion.takes_blank_lines and replacement:
        blanks, rest = _split_blank_lines(replacement[0].leading_lines)
        inserted[0] = inserted[0].with_changes(leading_lines=blanks + list(inserted[0].leading_lines))
        replacement[0] = replacement[0].with_changes(
            leading_lines=([cst.EmptyLine()] if blanks and rest else []) + rest)
    return inserted


def _split_blank_lines(lines: Iterable[cst.EmptyLine]) -> tuple[list[cst.EmptyLine], list[cst.EmptyLine]]:
    """Leading lines -> (the blank lines before the first comment, the rest)."""
    lines = list(lines)
    count = 0
    while count < len(lines) and lines[count].comment is None:
        count += 1
    return lines[:count], lines[count:]


def _guard(statements: Sequence[Statement], guard: str, edits: Edits) -> cst.If:
    """`if is_main:` around statements; the comments above the first move above the if. A
    one-line `if test: print(x)` alone takes the guard into its test instead."""
    first = statements[0]
    if len(statements) == 1 and isinstance(first, cst.If) and first.orelse is None \
            and isinstance(first.body, cst.SimpleStatementSuite):
        return first.with_changes(test=_and_guard(first.test, guard, edits))
    # A blank line moved into the new block must stay blank, not gain the block's indent.
    inner = [first.with_changes(leading_lines=())] + [
        statement.with_changes(leading_lines=[
            line.with_changes(indent=False) if line.comment is None else line
            for line in statement.leading_lines
        ])
        for statement in statements[1:]
    ]
    return cst.If(
        test=edits.expression(guard),
        body=cst.IndentedBlock(body=inner),
        leading_lines=first.leading_lines,
    )


def _end_of_imports(body: Sequence[Statement]) -> int:
    """Where the helpers go: after the leading import block and the imports that follow it,
    in the same paragraph, behind a few bare calls (`import matplotlib`,
    `matplotlib.use("Agg")`, `import matplotlib.pyplot as plt` on consecutive lines), so that
    no helper splits the script's imports. A helper only runs when called, later. A blank
    line or a comment ends the paragraph: what follows it is another part of the script."""
    _, end = import_block(body)
    while True:
        after = end
        while after < len(body) and _bare_call(body[after]) and not body[after].leading_lines:
            after += 1
        if after == end or after == len(body) or not imports_of(body[after]) or body[after].leading_lines:
            return end
        end = after
        while end < len(body) and imports_of(body[end]) and not body[end].leading_lines:
            end += 1


def _two_blank_lines_above(statement: Statement) -> Statement:
    """The code below the helpers starts two blank lines after the last one, as PEP 8 has it
    after a function (its comments, if any, below those lines)."""
    lines = list(statement.leading_lines)
    blank = next((index for index, line in enumerate(lines) if line.comment is not None), len(lines))
    if blank >= 2:
        return statement
    return statement.with_changes(leading_lines=[cst.EmptyLine()] * (2 - blank) + lines)


def _bare_call(statement: Statement) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and all(
        isinstance(small, cst.Expr) and isinstance(small.value, cst.Call) for small in statement.body)


def _and_guard(test: cst.BaseExpression, guard: str, edits: Edits) -> cst.BooleanOperation:
    """`test and is_main`, the test in parentheses where `and` would bind into it."""
    if isinstance(test, (cst.BooleanOperation, cst.IfExp, cst.Lambda, cst.NamedExpr)) and not test.lpar:
        test = test.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return cst.BooleanOperation(left=test, operator=cst.And(), right=edits.expression(guard))


def _try_finally(statement: Statement, cleanup: Sequence[Statement], edits: Edits) -> cst.Try:
    return cst.Try(
        body=cst.IndentedBlock(body=[statement.with_changes(leading_lines=())]),
        finalbody=cst.Finally(body=cst.IndentedBlock(body=cleanup)),
        leading_lines=statement.leading_lines,
    )


def _called_helpers(prelude: Sequence[Statement], code: Sequence[Statement]) -> list[Statement]:
    """The helpers the emitted code calls, itself or through another helper it calls: a
    helper a rule asked for whose call another edit then left out (a guard merged into an
    enclosing one) is not emitted unused."""
    if not prelude:
        return []  # (most modules: no walk of the whole output for the names it reads)
    called = _names_called(code)
    kept: list[Statement] = []
    pending = list(prelude)
    while True:
        found = [helper for helper in pending if not isinstance(helper, cst.FunctionDef) or helper.name.value in called]
        if not found:
            break
        for helper in found:
            pending.remove(helper)
            called |= _names_called([helper])
        kept.extend(found)
    return [helper for helper in prelude if helper in kept]


def _names_called(statements: Sequence[Statement]) -> set[str]:
    """The names the statements read: a helper is called, or handed on (`worker_init_fn=f`)."""
    return {name.value for statement in statements for name in find_all(statement, cst.Name)}
