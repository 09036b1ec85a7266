"""GPU placements a helper module makes when it is imported take this rank's GPU (DDP012).

A module of the project runs its top level when the script imports it, above the script's
setup block: `torch.cuda.set_device(local_rank)` has not run yet, so the current GPU ("cuda",
`.cuda()`) is GPU 0 in every process. A tensor placed there (`MEAN = torch.tensor(...).to(device)`,
`WEIGHTS.cuda()`, `torch.linspace(..., device=DEVICE)`, a class attribute) sits on GPU 0 of
every rank, and rank 1's first operation with its own batch fails ("Expected all tensors to be
on the same device"), while on a CPU-only machine nothing shows. The device those placements
name takes this rank's index from torchrun's LOCAL_RANK (0 under plain `python`, the GPU that
"cuda" named there): a string stays a string. A device a helper names only inside functions
is left as it is: those run after the setup, where "cuda" is this rank's GPU.
"""
from collections.abc import Iterator, Sequence
from typing import Callable, Optional, Union

import libcst as cst

from ddpify.analysis import names
from ddpify.analysis.control import Facts
from ddpify.analysis.nodes import calls_within, string_value
from ddpify.diagnostics import Rule, Severity
from ddpify.emit.edits import Edits, replacement
from ddpify.plan import Plan
from ddpify.rules.cases import TRAINING, Silent

RULES = (
    Rule("DDP012", Severity.EDIT, "GPU a helper module places tensors on at import takes this rank's GPU",
         "A module the script imports runs its top level before the script's setup pins this "
         "process to its GPU, so \"cuda\" there is GPU 0 in every process: a tensor built at "
         "import would sit on GPU 0 of every rank and meet rank 1's batches on GPU 1.",
         "Nothing to do."),
)

CASES = (
    # The script itself: its setup block comes before its own statements that place tensors.
    Silent(TRAINING.replace("model = torch.nn.Linear(4, 1).to(device)\n",
                            "MEAN = torch.zeros(4).to(device)\nmodel = torch.nn.Linear(4, 1).to(device)\n"),
           "DDP012"),
)

_SimpleStatements = Union[cst.SimpleStatementLine, cst.SimpleStatementSuite]

# Names whose definitions are followed from one placement to the string that names the GPU.
_FOLLOW_DEPTH = 3


def plan(facts: Facts, edits: Edits, setup: Plan) -> None:
    if setup.library:
        plan_import_time_placements(facts, edits)


def plan_import_time_placements(facts: Facts, edits: Edits) -> None:
    """Rule: in a module another module of the project imports, every "cuda" (or "cuda:0") a
    top-level placement resolves to becomes `"cuda:" + LOCAL_RANK`, and a top-level `.cuda()`
    takes LOCAL_RANK as its index."""
    statements = list(_import_time_statements(facts.module.body))
    definitions = _top_level_definitions(statements)
    torch_devices = set(facts.calls_named.get(names.TORCH_DEVICE, ()))
    rewritten: set[cst.SimpleString] = set()  # one string may name the GPU of several placements
    for statement in statements:
        for call in calls_within(statement):
            if _inside_a_lambda(facts, call, statement):
                continue
            if _current_gpu_move(call):
                edits.expressions[call] = _given_local_rank_index(edits)
                edits.imports.add("os")
                edits.report("DDP012", call, "`.cuda()` at import names GPU 0 on every rank: "
                                             "given this rank's LOCAL_RANK")
                continue
            device = _device_named(call)
            if device is None:
                continue
            for string in _gpu_strings(device, definitions, torch_devices, _FOLLOW_DEPTH):
                if string not in rewritten:
                    rewritten.add(string)
                    _to_this_ranks_gpu(facts, edits, string)


def _import_time_statements(body: Sequence[cst.BaseStatement]) -> Iterator[_SimpleStatements]:
    """The simple statements that run when the module is imported: the top level, the bodies
    of its `if`/`for`/`with`/`try` and of its classes, not functions, nor the `__main__` block
    (which runs only when the module is itself the script)."""
    for statement in body:
        if isinstance(statement, cst.SimpleStatementLine):
            yield statement
        elif isinstance(statement, cst.If):
            if _tests_main(statement.test):
                continue
            yield from _suite(statement.body)
            orelse = statement.orelse
            while orelse is not None:
                yield from _suite(orelse.body)
                orelse = orelse.orelse if isinstance(orelse, cst.If) else None
        elif isinstance(statement, cst.Try):
            for suite in (statement.body, *(handler.body for handler in statement.handlers),
                          *(part.body for part in (statement.orelse, statement.finalbody) if part is not None)):
                yield from _suite(suite)
        elif isinstance(statement, (cst.For, cst.While, cst.With, cst.ClassDef)):
            yield from _suite(statement.body)


def _suite(suite: cst.BaseSuite) -> Iterator[_SimpleStatements]:
    if isinstance(suite, cst.SimpleStatementSuite):
        yield suite  # `if cuda: MEAN = MEAN.cuda()` on one line
    elif isinstance(suite, cst.IndentedBlock):
        yield from _import_time_statements(suite.body)


def _tests_main(test: cst.BaseExpression) -> bool:
    return isinstance(test, cst.Comparison) and any(
        string_value(part) == "__main__" for part in (test.left, *(target.comparator for target in test.comparisons)))


def _top_level_definitions(statements: list[_SimpleStatements]) -> dict[str, list[cst.BaseExpression]]:
    """name -> the values the import-time code assigns it (`device = ...`, `DEVICE: str = ...`)."""
    definitions: dict[str, list[cst.BaseExpression]] = {}
    for statement in statements:
        for small in statement.body:
            if isinstance(small, cst.Assign):
                for target in small.targets:
                    if isinstance(target.target, cst.Name):
                        definitions.setdefault(target.target.value, []).append(small.value)
            elif isinstance(small, cst.AnnAssign) and small.value is not None and isinstance(small.target, cst.Name):
                definitions.setdefault(small.target.value, []).append(small.value)
    return definitions


def _inside_a_lambda(facts: Facts, call: cst.Call, statement: cst.CSTNode) -> bool:
    node: Optional[cst.CSTNode] = facts.parents.get(call)
    while node is not None and node is not statement:
        if isinstance(node, cst.Lambda):
            return True
        node = facts.parents.get(node)
    return False


def _current_gpu_move(call: cst.Call) -> bool:
    """`tensor.cuda()` or `.cuda(0)` (not `torch.cuda.xxx()`, nor a GPU the user numbered)."""
    func = call.func
    if not isinstance(func, cst.Attribute) or func.attr.value != "cuda":
        return False
    if isinstance(func.value, cst.Name) and func.value.value == "torch":
        return False
    positional = [arg for arg in call.args if arg.keyword is None and arg.star == ""]
    if len(call.args) != len(positional) or len(positional) > 1:
        return False
    return not positional or (isinstance(positional[0].value, cst.Integer) and positional[0].value.value == "0")


def _given_local_rank_index(edits: Edits) -> Callable[[cst.Call], cst.Call]:
    """`.cuda()` -> `.cuda(int(os.environ.get("LOCAL_RANK", 0)))`, edits inside it kept."""
    def rewrite(call: cst.Call) -> cst.Call:
        return call.with_changes(args=[cst.Arg(edits.expression('int(os.environ.get("LOCAL_RANK", 0))'))])
    return rewrite


def _device_named(call: cst.Call) -> Optional[cst.BaseExpression]:
    """The device a call places its result on: `.to(device)`, `.to(device=...)`, `device=`."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == "device":
            return arg.value
    func = call.func
    if isinstance(func, cst.Attribute) and func.attr.value == "to" and call.args and call.args[0].keyword is None:
        return call.args[0].value
    return None


def _gpu_strings(value: cst.BaseExpression, definitions: dict[str, list[cst.BaseExpression]],
                 torch_devices: set[cst.Call], depth: int) -> list[cst.SimpleString]:
    """The strings naming the current GPU ("cuda", "cuda:0") that `value` evaluates to, through
    `torch.device(...)`, conditional expressions and top-level names."""
    if isinstance(value, cst.SimpleString):
        return [value] if string_value(value) in ("cuda", "cuda:0") else []
    if isinstance(value, cst.IfExp):
        return [*_gpu_strings(value.body, definitions, torch_devices, depth),
                *_gpu_strings(value.orelse, definitions, torch_devices, depth)]
    if isinstance(value, cst.Call) and value in torch_devices and len(value.args) == 1:
        return _gpu_strings(value.args[0].value, definitions, torch_devices, depth)
    if isinstance(value, cst.Name) and depth > 0:
        return [string for defined in definitions.get(value.value, ())
                for string in _gpu_strings(defined, definitions, torch_devices, depth - 1)]
    return []


def _to_this_ranks_gpu(facts: Facts, edits: Edits, string: cst.SimpleString) -> None:
    quote = f"{string.prefix}{string.quote}"
    code = f'{quote}cuda:{string.quote} + os.environ.get({quote}LOCAL_RANK{string.quote}, {quote}0{string.quote})'
    parent = facts.parents.get(string)
    if not isinstance(parent, (cst.Arg, cst.Assign, cst.AnnAssign, cst.IfExp)):
        code = f"({code})"
    edits.expressions[string] = replacement(edits, code)
    edits.imports.add("os")
    ours = edits.report("DDP012", string)
    # It takes over the string the helper-module rule made the current GPU ("cuda:0" -> "cuda").
    edits.diagnostics[:] = [diagnostic for diagnostic in edits.diagnostics if not (
        diagnostic.code == "DDP002" and (diagnostic.line, diagnostic.column) == (ours.line, ours.column))]
