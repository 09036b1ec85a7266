"""Rank-0 guards for output and files, and map_location on load (DDP301-DDP303).

Every rank runs the same code: without a guard each print appears N times and N processes
race to write the same checkpoint.
"""
import libcst as cst

from ddpify.analysis import Facts
from ddpify.transforms.edits import Edits
from ddpify.transforms.setup import SetupPlan


def plan(facts: Facts, edits: Edits, setup: SetupPlan) -> None:
    for statement in facts.output_statements:
        if not _is_single_call_line(statement):
            continue
        edits.guarded[statement] = setup.guard_for(facts, statement)
        call = statement.body[0].value
        code = "DDP302" if call in facts.save_calls else "DDP301"
        edits.report(code, statement)
    for call in facts.load_calls:
        if any(arg.keyword is not None and arg.keyword.value == "map_location" for arg in call.args):
            continue
        location = setup.device if setup.sees_setup(facts, call) else '"cpu"'
        edits.expressions[call] = _with_map_location(location, edits)
        edits.report("DDP303", call)


def _is_single_call_line(statement: cst.BaseStatement) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
    )


def _with_map_location(location: str, edits: Edits):
    def rewrite(call: cst.Call) -> cst.Call:
        args = list(call.args)
        last = args[-1]
        if last.comma is cst.MaybeSentinel.DEFAULT or last.comma is None:
            args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        args.append(cst.Arg(keyword=cst.Name("map_location"), value=edits.expression(location),
                            equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))))
        return call.with_changes(args=args)

    return rewrite
