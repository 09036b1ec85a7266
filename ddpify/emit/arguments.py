"""Arguments of a call, edited at node level: a keyword added or changed, a sampler passed to
a DataLoader, wrapped as black would wrap them where the line grows too long."""
from typing import Callable, Optional, Union, cast

import libcst as cst

from ddpify.analysis.control import Facts
from ddpify.analysis.facts import Loader, Statement
from ddpify.emit.edits import Edits
from ddpify.emit.layout import fits


def fit_conditional(code: str, facts: Facts, anchor: cst.BaseStatement, condition: str = "distributed") -> str:
    """`x = a if distributed else None` as black writes it when the line is too long."""
    indent = facts.positions[anchor].start.column
    if fits(indent, code.rstrip("\n")):
        return code
    target, value = code.rstrip("\n").split(" = ", 1)
    if fits(indent + 4, value):
        return f"{target} = (\n    {value}\n)\n"
    body, rest = value.rsplit(f" if {condition} else ", 1)
    return f"{target} = (\n    {body}\n    if {condition}\n    else {rest}\n)\n"


def edit_loader_arguments(edits: Edits, loader: Loader, sampler: str,
                    dataset: str) -> Callable[[cst.Call], cst.Call]:
    """The same change as _loader_args, made on the argument nodes: each argument keeps its
    own comma, line break and comment; `sampler=` takes the layout of its neighbours."""
    originals = list(loader.call.args)

    def rewrite(call: cst.Call) -> cst.Call:
        args = list(call.args)
        if len(args) != len(originals):
            return call
        out: list[cst.Arg] = []
        placed = False
        new = cst.Arg(keyword=cst.Name("sampler"), value=cst.Name(sampler),
                      equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                            whitespace_after=cst.SimpleWhitespace("")))
        for index, (original, arg) in enumerate(zip(originals, args)):
            if original.value is loader.dataset and dataset != edits.code(loader.dataset):
                arg = arg.with_changes(value=cst.Name(dataset))
            if original.star == "**" and not placed:
                out.append(new.with_changes(comma=_plain_comma(out[-1].comma if out else None)))
                placed = True
            if original.keyword is not None and original.keyword.value == "shuffle":
                shuffle = shuffle_beside(edits.code(original.value), sampler)
                if shuffle is not None:
                    arg = arg.with_changes(value=edits.expression(shuffle))
                out.append(arg)
                _append_after(out, new, last=index == len(args) - 1)
                placed = True
                continue
            out.append(arg)
        if not placed:
            _append_after(out, new, last=True)
        return call.with_changes(args=out)

    return rewrite


def _plain_comma(comma: Union[cst.Comma, cst.MaybeSentinel, None]) -> cst.Comma:
    """A comma like `comma` (same line break and indent), without its trailing comment."""
    if not isinstance(comma, cst.Comma):
        return cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    after = comma.whitespace_after
    if isinstance(after, cst.ParenthesizedWhitespace):
        after = after.with_changes(first_line=cst.TrailingWhitespace())
    return comma.with_changes(whitespace_after=after)


def _append_after(out: list[cst.Arg], new: cst.Arg, last: bool) -> None:
    """Put `new` after the last argument of `out`; when that one closes the call, `new`
    takes over its closing comma and it takes the comma of the argument before it."""
    previous = out[-1]
    if not last:
        out.append(new.with_changes(comma=_plain_comma(previous.comma)))
        return
    template = _plain_comma(out[-2].comma if len(out) > 1 else None)
    if isinstance(previous.comma, cst.Comma):
        own = previous.comma.whitespace_after
        if isinstance(own, cst.ParenthesizedWhitespace) and isinstance(
                template.whitespace_after, cst.ParenthesizedWhitespace):
            template = template.with_changes(whitespace_after=template.whitespace_after.with_changes(
                first_line=own.first_line))
        out[-1] = previous.with_changes(comma=template)
        out.append(new.with_changes(comma=_plain_comma(previous.comma)))
    else:
        out[-1] = previous.with_changes(comma=template)
        out.append(new.with_changes(comma=cst.MaybeSentinel.DEFAULT))


def loader_statement(facts: Facts, edits: Edits, loader: Loader, args: list[str]) -> Statement:
    """The loader call rebuilt from its arguments, wrapped as black would."""
    statement = cast(cst.SimpleStatementLine, loader.statement)  # _can_add_sampler checked
    if loader.returned:
        head = "return " + edits.code(loader.call.func)
    else:
        # `name = DataLoader(...)`, the line's first small statement.
        assign = cast(cst.Assign, statement.body[0])
        head = edits.code(assign.targets[0].target) + " = " + edits.code(loader.call.func)
    indent = " " * (facts.positions[statement].start.column)
    one_line = f"{head}({', '.join(args)})"
    if "\n" not in one_line and fits(len(indent), one_line):
        code = one_line
    elif fits(len(indent) + 4, ", ".join(args)):
        code = f"{head}(\n    {', '.join(args)}\n)"
    else:
        code = f"{head}(\n" + "".join(f"    {arg},\n" for arg in args) + ")"
    trailing = statement.trailing_whitespace
    return edits.statement(code + "\n").with_changes(
        leading_lines=statement.leading_lines, trailing_whitespace=trailing
    )


def loader_call_in_place(facts: Facts, edits: Edits, loader: Loader, args: list[str]) -> str:
    """A loader call built where it is used (`for x, y in DataLoader(...):`), rebuilt from
    its arguments: on its line when the line still fits, else its arguments on the lines
    below, as black would wrap them (libcst indents those lines by the block's indent)."""
    call = edits.code(loader.call)
    head = edits.code(loader.call.func)
    one_line = f"{head}({', '.join(args)})"
    line = _source_line(facts, loader.call)
    statement_indent = facts.positions[loader.statement].start.column
    if "\n" not in call and fits(0, line.rstrip().replace(call, one_line, 1)):
        return one_line
    if fits(statement_indent + 4, ", ".join(args)):
        return f"{head}(\n    {', '.join(args)}\n)"
    return f"{head}(\n" + "".join(f"    {arg},\n" for arg in args) + ")"


def add_keyword(facts: Facts, edits: Edits, call: cst.Call, keyword: str, value: str) -> None:
    line = _source_line(facts, call)
    too_long = not fits(len(line), f", {keyword}={value}")
    one_line = facts.positions[call].start.line == facts.positions[call].end.line
    indent = len(line) - len(line.lstrip())
    wrap_at = indent if too_long and one_line else None
    # On the statement's own first line, the wrapped lines follow the statement's indent, also
    # where a guard (`if is_main:`) indents the statement further.
    on_first_line = facts.line_of(call) == facts.line_of(facts.statement_of(call))
    edits.expressions[call] = with_keyword(keyword, value, edits, wrap_at, follow_statement=on_first_line)


def _line_break_only(whitespace: cst.ParenthesizedWhitespace) -> cst.ParenthesizedWhitespace:
    """The line break and indent of an argument's line, without the comment it ends with or
    the comment lines after it: copied to a new argument's line, they would repeat there."""
    return whitespace.with_changes(first_line=cst.TrailingWhitespace(), empty_lines=[])


def _new_line(indent: str, follow_statement: bool = False) -> cst.ParenthesizedWhitespace:
    """A line break, then `indent`: from the line's start, or, following the statement, after
    the indent of the block that holds it (wherever the statement ends up)."""
    return cst.ParenthesizedWhitespace(first_line=cst.TrailingWhitespace(), indent=follow_statement,
                                       last_line=cst.SimpleWhitespace(indent))


def _source_line(facts: Facts, node: cst.CSTNode) -> str:
    return facts.module.code.splitlines()[facts.line_of(node) - 1]


def with_keyword(keyword: str, value: str, edits: Edits, wrap_at: Optional[int] = None,
                 follow_statement: bool = False) -> Callable[[cst.Call], cst.Call]:
    """`keyword=value` appended to a call; with wrap_at (the line's indent), the arguments move
    to a line of their own, as black writes a call that no longer fits (follow_statement: the
    call is on its statement's first line, whose indent the new lines take)."""
    def rewrite(call: cst.Call) -> cst.Call:
        args = list(call.args)
        closing: Optional[cst.BaseParenthesizableWhitespace] = None
        trailing: Optional[cst.Comma] = None
        if args:
            last = args[-1]
            between: cst.BaseParenthesizableWhitespace = cst.SimpleWhitespace(" ")
            if isinstance(last.whitespace_after_arg, cst.ParenthesizedWhitespace):
                # One argument per line and `)` on a line of its own: the new argument gets a
                # line of its own too, indented as the one above it, and `)` stays below.
                closing = last.whitespace_after_arg
                above = args[-2].comma.whitespace_after if len(args) > 1 and isinstance(
                    args[-2].comma, cst.Comma) else call.whitespace_before_args
                if isinstance(above, cst.ParenthesizedWhitespace):
                    between = _line_break_only(above)
                last = last.with_changes(whitespace_after_arg=cst.SimpleWhitespace(""))
            if isinstance(last.comma, cst.Comma) and isinstance(last.comma.whitespace_after,
                                                                cst.ParenthesizedWhitespace):
                # `name="n",` then `)` on a line of its own (a magic trailing comma): the new
                # argument takes a line of its own, indented as the one above, and keeps the
                # trailing comma before `)`.
                own = last.comma.whitespace_after
                trailing = last.comma.with_changes(whitespace_after=_line_break_only(own).with_changes(
                    empty_lines=own.empty_lines))
                above = next((arg.comma.whitespace_after for arg in reversed(args[:-1])
                              if isinstance(arg.comma, cst.Comma)
                              and isinstance(arg.comma.whitespace_after, cst.ParenthesizedWhitespace)),
                             call.whitespace_before_args)
                if isinstance(above, cst.ParenthesizedWhitespace):
                    # (The last argument keeps the comment of its own line; the new one's line has none.)
                    last = last.with_changes(comma=last.comma.with_changes(whitespace_after=own.with_changes(
                        empty_lines=[], indent=above.indent, last_line=above.last_line)))
                else:
                    trailing = None
            if last.comma is cst.MaybeSentinel.DEFAULT or last.comma is None:
                last = last.with_changes(comma=cst.Comma(whitespace_after=between))
            args[-1] = last
        args.append(cst.Arg(keyword=cst.Name(keyword), value=edits.expression(value),
                            equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))))
        if trailing is not None:
            args[-1] = args[-1].with_changes(comma=trailing)
        if closing is not None:
            args[-1] = args[-1].with_changes(whitespace_after_arg=closing)
        if wrap_at is None:
            return call.with_changes(args=args)
        start = 0 if follow_statement else wrap_at
        args[-1] = args[-1].with_changes(whitespace_after_arg=_new_line(" " * start, follow_statement))
        return call.with_changes(args=args,
                                 whitespace_before_args=_new_line(" " * (start + 4), follow_statement))

    return rewrite


def shuffle_beside(shuffle: str, sampler: str) -> Optional[str]:
    """What `shuffle=` becomes beside `sampler=`: DataLoader refuses shuffle=True with a
    sampler, so it shuffles only when there is none. None: `shuffle=False` stays."""
    if shuffle == "False":
        return None
    return f"{sampler} is None" if shuffle == "True" else f"{shuffle} and {sampler} is None"
