"""A model moved by the function that trains it, on every call from the epoch loop.

`def train_fn(model, loader, optimizer, device): model.to(device); model.train(); ...`,
called as `train_fn(model, ...)` once per epoch by a caller that holds `model` from before
the loop (the common notebook shape, with `valid_fn` alike). After the first call the
move is a no-op, so the model reaches its device before the loop as well as inside it; a
wrap inside `train_fn` would build a new DistributedDataParallel on every call (each one
broadcasts every parameter from rank 0 and builds a reducer) and move the module a previous
wrapper holds. The wrap belongs once, in the caller, before the loop: the function's move,
with the caller's arguments, goes there first (when the caller does not move the model
itself), and every move the functions handed the wrapper make of it is guarded with
`isinstance(..., DDP)`: a wrapper is already on its device, and a plain module (plain
`python`, or another model handed in) is moved as before.
"""

from typing import Optional, Union, cast

import libcst as cst

from ddpify.analysis.control import Facts
from ddpify.analysis.facts import Model, Statement
from ddpify.analysis.nodes import dotted_name, find_all, handed_for, names_in, parameter_names
from ddpify.emit.edits import Edits

MOVES = ("to", "cuda")


MODES = ("train", "eval")


def in_place_move(statement: Statement, name: str) -> Optional[cst.Call]:
    """`name.to(device)` / `name.cuda()` alone on its line, `name = name.to(device)`, or a
    chain of one move and mode switches on the name (`name.train().to(device)`, `name.to(device).eval()`):
    the move, else None."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    small = statement.body[0]
    if isinstance(small, cst.Assign):
        if len(small.targets) != 1 or dotted_name(small.targets[0].target) != name:
            return None
        chain = _chain(small.value, name)
        return chain[0] if len(chain) == 1 and _method(chain[0]) in MOVES else None
    if not isinstance(small, cst.Expr):
        return None
    chain = _chain(small.value, name)
    moves = [call for call in chain if _method(call) in MOVES]
    return moves[0] if len(moves) == 1 and all(_method(call) in (*MOVES, *MODES) for call in chain) else None


def _method(call: cst.Call) -> str:
    return call.func.attr.value if isinstance(call.func, cst.Attribute) else ""


def _chain(value: cst.BaseExpression, name: str) -> list[cst.Call]:
    """The method calls of `name.a(...).b(...)`, first first; empty when the chain does not
    start at the name."""
    calls: list[cst.Call] = []
    while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
        calls.insert(0, value)
        value = value.func.value
    return calls if dotted_name(value) == name else []


def moves_only(facts: Facts, function: cst.FunctionDef, name: str) -> list[cst.Call]:
    """The function's in-place moves of its parameter `name`, when every statement of it that
    binds or moves the parameter is one (else empty)."""
    moves: list[cst.Call] = []
    # (Its own lines, read here: a chain `model.train().to(device)` is filed under no name.)
    for statement in find_all(function.body, cst.SimpleStatementLine, into_functions=False):
        if name not in names_in(statement):
            continue
        move = in_place_move(statement, name)
        if move is not None:
            moves.append(move)
        elif _binds_or_moves(statement, name):
            return []
    return moves


def _binds_or_moves(statement: Statement, name: str) -> bool:
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    for small in statement.body:
        if isinstance(small, (cst.Assign, cst.AnnAssign, cst.AugAssign)):
            targets = small.targets if isinstance(small, cst.Assign) else [small]
            if any(name in names_in(target.target) for target in targets):
                return True
        value = getattr(small, "value", None)
        while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
            if value.func.attr.value in MOVES and dotted_name(value.func.value) == name:
                return True
            value = value.func.value
    return False


def _rebound_in(facts: Facts, loop: Union[cst.For, cst.While], name: str) -> bool:
    start, end = facts.start_of(loop.body), facts.end_of(loop.body)
    return isinstance(loop, cst.For) and name in names_in(loop.target) or any(
        _binds_or_moves(statement, name) and start <= facts.start_of(statement) and facts.end_of(statement) <= end
        for statement in facts.statements_touching.get(name, ()))


def _move_with_arguments(facts: Facts, function: cst.FunctionDef, call: cst.Call, move: cst.Call,
                         held: str) -> Optional[str]:
    """`held.to(<the caller's value for each parameter the move reads>)`: only for arguments
    that are a parameter handed in as a plain name or attribute (`device`, `args.device`), a
    module-level name both read (`CFG.device`), or a literal."""
    parameters = set(parameter_names(function))
    arguments: list[str] = []
    for arg in move.args:
        value = arg.value
        if isinstance(value, cst.Name) and value.value in parameters:
            if _assigned_in(function, value.value):
                return None  # (`if not torch.cuda.is_available(): device = "cpu"`: not the caller's value)
            handed = handed_for(call, function, value.value)
            if handed is None or dotted_name(handed) is None:
                return None
            value = handed
        elif not isinstance(value, (cst.SimpleString, cst.Integer)) \
                and not _global_in_both(facts, function, call, value):
            return None
        keyword = f"{arg.keyword.value}=" if arg.keyword is not None else ""
        arguments.append(keyword + facts.module.code_for_node(value))
    method = move.func.attr.value if isinstance(move.func, cst.Attribute) else "to"
    return f"{held}.{method}({', '.join(arguments)})"


def _assigned_in(function: cst.FunctionDef, name: str) -> bool:
    return any(_binds(statement, name) for statement in find_all(function.body, cst.SimpleStatementLine,
                                                                   into_functions=False))


def _global_in_both(facts: Facts, function: cst.FunctionDef, call: cst.Call, value: cst.BaseExpression) -> bool:
    """`CFG.device`, `DEVICE`: a module-level name, read as such by the function and by its
    caller (neither binds it), so the caller reads the same value."""
    name = dotted_name(value)
    if name is None:
        return False
    base = name.split(".", 1)[0]
    caller = facts.function_of(call)
    return base not in parameter_names(function) and not facts.binds_locally(function, base) and (
        caller is None or base not in parameter_names(caller) and not facts.binds_locally(caller, base))


def moved_by_the_caller(facts: Facts, model: Model) -> bool:
    """The caller moves the model itself (`model.to(device)`, `Net().to(device)`) in its
    function: no move to hoist from the callee."""
    return any(facts.function_of(statement) is model.function and _binds_or_moves(statement, model.name)
               and isinstance(statement, cst.SimpleStatementLine)
               and any(isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
                       and call.func.attr.value in MOVES for call in _calls_in(statement))
               for statement in facts.statements_touching.get(model.name, ()))


def _calls_in(statement: cst.SimpleStatementLine) -> list[cst.Call]:
    found: list[cst.Call] = []

    class Calls(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            found.append(node)

    statement.visit(Calls())
    return found


def move_made_by_callees(facts: Facts, model: Model, anchor: Optional[Statement]) -> Optional[str]:
    """Rule: the caller holds the model from before a loop (a new model per fold, built in the
    fold loop around the epoch loop, is one model per epoch loop) and hands it, in that loop,
    to a function that moves what it is handed in place (`model.to(device)`, reading only its
    parameters, module-level names and literals): after the first call the move is a no-op,
    and the model reaches its device before the loop as well. That move, with the caller's
    arguments, is the one to make before the wrap at `anchor`; None when the caller moves the
    model itself, or any such call sits in a loop the anchor does not end before, in a loop
    that rebinds the model, or moves with arguments the caller cannot read there. (A call out
    of any loop, a final evaluation, is no reason to hoist: its move is guarded if it is the
    same, guard_moves_in_callees.)"""
    if anchor is None or "." in model.name or moved_by_the_caller(facts, model):
        return None
    hoisted: Optional[str] = None
    for callee, parameter, call in facts._calls_passing(model.name, model.function):
        moves = moves_only(facts, callee, parameter)
        loops = facts.enclosing_for_and_while_loops(call)
        if not moves or not loops or facts.start_of(call) < facts.end_of(anchor):
            continue
        move = _move_with_arguments(facts, callee, call, moves[0], model.name)
        if move is None or facts.start_of(loops[0]) < facts.end_of(anchor) \
                or _rebound_in(facts, loops[0], model.name) or _bound_after(facts, model, anchor, move):
            return None
        hoisted = hoisted or move
    return hoisted


def _caller_moves(facts: Facts, model: Model) -> set[str]:
    """The caller's moves of the model as `model.to(<its arguments>)`: the one made before the
    wrap for a function's (move_made_by_callees), else its own (`Net().to(device)`)."""
    if model.moved_by_callee is not None:
        return {model.moved_by_callee}
    found: set[str] = set()
    for statement in facts.statements_touching.get(model.name, ()):
        if facts.function_of(statement) is model.function and isinstance(statement, cst.SimpleStatementLine) \
                and _binds_or_moves(statement, model.name):
            found |= {f"{model.name}.{_method(call)}({_arguments(facts, call)})"
                      for call in _calls_in(statement) if _method(call) in MOVES}
    return found


def _bound_after(facts: Facts, model: Model, anchor: Statement, move: str) -> bool:
    """A name the move reads (`device`) is bound in the caller after the anchor."""
    read = names_in(cst.parse_expression(move)) - {model.name}
    return any(facts.function_of(statement) is model.function and facts.start_of(statement) > facts.end_of(anchor)
               and _binds(statement, name)
               for name in read for statement in facts.statements_touching.get(name, ()))


def _binds(statement: Statement, name: str) -> bool:
    if isinstance(statement, cst.SimpleStatementLine):
        return any(isinstance(small, (cst.Assign, cst.AnnAssign, cst.AugAssign)) and name in names_in(
            small.targets[0].target if isinstance(small, cst.Assign) else small.target) for small in statement.body)
    return isinstance(statement, cst.For) and name in names_in(statement.target)


def guard_moves_in_callees(facts: Facts, edits: Edits, model: Model, wrap: Statement) -> None:
    """Every function handed the wrapped model after its wrap that moves what it is handed in
    place, to where the caller moved it, moves it only when it is not the wrapper (a `.to()`
    of a DDP model or of the module it holds, after the wrap, is what DESIGN §2.3 rules out). A chain with mode switches
    (`model.train().to(device)`) becomes a line per call, in its order, the switches kept
    for the wrapper (each returns the module it is called on)."""
    targets = _caller_moves(facts, model)
    for callee, parameter, call in facts._calls_passing(model.name, model.function):
        if facts.start_of(call) <= facts.end_of(wrap) or callee is model.function:
            continue
        for move in moves_only(facts, callee, parameter):
            statement = facts.statement_of(move)
            if statement in edits.guarded or statement in edits.removed or statement in edits.replaced \
                    or _move_with_arguments(facts, callee, call, move, model.name) not in targets:
                continue  # (a move elsewhere, `.to("cpu")` to predict after training, stays)
            guard = f"not isinstance({parameter}, DDP)"
            small = cast(cst.SimpleStatementLine, statement).body[0]
            chain = _chain(small.value, parameter) if isinstance(small, cst.Expr) else []
            if len(chain) > 1:
                lines = [f"if {guard}:\n    {parameter}.{_method(each)}"
                         f"({_arguments(facts, each)})" if _method(each) in MOVES
                         else f"{parameter}.{_method(each)}({_arguments(facts, each)})" for each in chain]
                edits.replace(statement, edits.statements("\n".join(lines)))
            else:
                edits.guarded[statement] = guard
            edits.report("DDP126", statement)


def _arguments(facts: Facts, call: cst.Call) -> str:
    return ", ".join(facts.module.code_for_node(arg).rstrip(", ") for arg in call.args)


def report_wrapped_on_every_call(facts: Facts, edits: Edits, model: Model, wrap: Statement) -> None:
    """Rule: the wrap sits in a function, after its in-place move of the model it is handed,
    and a call of that function sits in a loop (move_made_by_callees could not take the move
    before it): a new wrapper on every call, around the module the last one wraps. Kept, and
    said (DDP944), so that it never exits 0 unseen."""
    function = model.function
    if function is None or model.name not in parameter_names(function) or facts.function_of(wrap) is not function \
            or not moves_only(facts, function, model.name):
        return
    looped = [call for call in facts.calls_of(function) if facts.enclosing_for_and_while_loops(call)]
    if looped:
        loop = facts.enclosing_for_and_while_loops(looped[0])[0]
        edits.report("DDP944", wrap, f"`{model.name}` is moved and wrapped in `{function.name.value}()`, called "
                     f"on every pass of the loop at line {facts.line_of(loop)}: a new DDP per call around the "
                     f"module the last one wraps; move it to its device before that loop, where ddpify wraps it once")
