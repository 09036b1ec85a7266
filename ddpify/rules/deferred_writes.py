"""Writes that run later than the line that holds them: a lambda that writes a file, and a
writer handed on as a value to a call that calls it later (DDP317, DDP318, DDP936).

Every rank runs the same code, so a file written where no guard reaches is written once per
rank: N processes race on one checkpoint, and a reader may load a half-written one. A
statement that writes is guarded where it stands (side_effects.py). A lambda's body and a
writer handed to a thread or a pool are not statements: they run when something else calls
them (`fit(..., on_best=lambda: torch.save(...))`, `pool.submit(torch.save, state, path)`),
so the guard goes where the write is made: in the lambda's body, asked each time it runs,
or around the statement that hands the writer on. Where neither fits, the write stays on
every rank and is reported (DDP936), never exit 0.
"""
from collections.abc import Iterator
from typing import Optional

import libcst as cst

from ddpify.analysis import names
from ddpify.analysis.control import Facts
from ddpify.analysis.nodes import calls_within, dotted_name, opens_for_writing
from ddpify.diagnostics import Rule, Severity
from ddpify.emit.edits import Edits, Rewrite, replacement
from ddpify.plan import Plan
from ddpify.rules.cases import TRAINING, Emits, Silent
from ddpify.rules.side_effects import enclosing_lambda, guard_writing_call, runs_shared_work

RULES = (
    Rule("DDP317", Severity.EDIT, "a lambda that writes a file (or prints) does so on rank 0 only",
         "A lambda's body runs when something calls it (a callback, a function of a table), "
         "on every rank, so each rank would write the file, racing on it (or print its line "
         "once per rank). Its write now runs "
         "in rank 0 only, asked each time it is called (`torch.save(...) if "
         "is_main_process() else None`: the write's own value is None too); a state dict it "
         "saves is the module's own, without DDP's `module.` prefix.",
         "Nothing to do."),
    Rule("DDP318", Severity.EDIT, "a writer handed on as a value is handed on by rank 0 only",
         "`pool.submit(torch.save, state, path)`, `Thread(target=torch.save, ...)`: the "
         "call runs the writer later, on every rank. The statement that hands it on (and "
         "every use of what it makes, a thread, a future) runs on rank 0 only.",
         "Nothing to do."),
    Rule("DDP936", Severity.WARNING, "a file written on every rank where no guard can reach",
         "This write runs when something else calls it (a lambda whose write is part of a "
         "larger expression or returns a value, a writer handed on in a statement whose result "
         "is used elsewhere), so ddpify cannot put it on rank 0 without changing what the code "
         "computes. It is left on every rank: each rank writes the same file.",
         "Write on rank 0 only: `if dist.get_rank() == 0:` around the call that writes, or a "
         "function that saves only there (`def save(...): if is_main: torch.save(...)`)."),
)

# Methods of any object that write the path they are given (with no path, `to_csv()` returns text).
_WRITING_METHODS = frozenset({"to_csv", "to_json", "to_parquet", "to_excel", "to_pickle", "savefig"})
_STATE_METHODS = frozenset({"state_dict"})
# Names of a rank-0 flag or predicate, ddpify's own first.
_RANK_ZERO_FLAGS = frozenset({"is_main", "is_main_process", "is_master", "main_process", "master_process",
                              "is_rank_zero", "is_rank0"})
# The rank-0 test a lambda asks when it is called, wherever it was made.
GUARD = "is_main_process()"


def plan(facts: Facts, edits: Edits, setup: Plan) -> None:
    for lambda_node, writes in _lambdas_that_write(facts):
        _guard_lambda(facts, edits, setup, lambda_node, writes)
    for value in facts.writers_handed_on:
        _guard_handing_on(facts, edits, setup, value)


def _writer_calls(facts: Facts) -> Iterator[tuple[cst.Call, bool]]:
    """Each call that writes a file, with whether its value is None."""
    for qualified in sorted(names.WRITERS_AS_VALUES):
        yield from ((call, qualified in names.WRITERS_RETURNING_NONE) for call in facts.calls_named.get(qualified, ()))
    # (A print too: each rank's line would show, once per rank.)
    yield from ((call, True) for call in facts.calls_named.get("builtins.print", ()))
    for qualified in sorted(names.OPEN):
        yield from ((call, False) for call in facts.calls_named.get(qualified, ()) if opens_for_writing(call))
    for callee, calls in sorted(facts.calls_by_callee.items()):
        if callee.rsplit(".", 1)[-1] in _WRITING_METHODS:
            yield from ((call, True) for call in calls if call.args)


def _lambdas_that_write(facts: Facts) -> list[tuple[cst.Lambda, list[tuple[cst.Call, bool]]]]:
    """Each lambda whose body writes a file, with its writes, in the order of the source."""
    found: dict[cst.Lambda, list[tuple[cst.Call, bool]]] = {}
    for call, returns_none in _writer_calls(facts):
        lambda_node = enclosing_lambda(facts, call)
        if lambda_node is not None:
            found.setdefault(lambda_node, []).append((call, returns_none))
    return sorted(found.items(), key=lambda item: facts.start_of(item[0]))


def _guard_lambda(facts: Facts, edits: Edits, setup: Plan, lambda_node: cst.Lambda,
                  writes: list[tuple[cst.Call, bool]]) -> None:
    """Rule: `lambda: torch.save(model.state_dict(), path)` becomes `lambda:
    torch.save(...) if is_main_process() else None`, when the write is the whole body and
    its value is None; a parameter of the lambda whose state dict it saves is read through
    `.module` (a caller may hand it the DDP wrapper)."""
    body = lambda_node.body
    if isinstance(body, cst.IfExp) and _rank_zero_test(body.test):
        return  # `lambda: torch.save(...) if is_main else None`: rank 0's already
    opened = {id(call) for qualified in names.OPEN for call in facts.calls_named.get(qualified, ())}
    if all(id(call) in opened for call, _ in writes):
        return  # `lambda: open(path, "a")`: the file it opens is os.devnull on the other ranks (side_effects.py)
    # (Every other write is inside the body's: `json.dump(d, open(path, "w"))`.) A model run
    # or a collective inside it must stay on every rank: on rank 0 alone it waits forever.
    parameters = {param.name.value for param in lambda_node.params.params}
    if not any(call is body and returns_none for call, returns_none in writes) or isinstance(
            body, cst.Call) and (runs_shared_work(facts, body) or any(
                dotted_name(inner.func) in parameters for inner in calls_within(body))):
        edits.report("DDP936", writes[0][0], "this lambda writes a file on every rank, and its write is part of "
                     "a larger expression, returns a value or runs what every rank must run: ddpify cannot put it "
                     "on rank 0 alone; write it in a function that saves on rank 0 only")
        return
    statement = facts.statement_of(lambda_node)
    if setup.function is not None and setup.sees_setup(facts, statement):
        # Made in the function that joins the group: its flag, which the lambda reads when called.
        edits.expressions[body] = _on_rank0(edits, setup.guard_for(facts, statement))
    else:
        # Made at the top of the script or in a function that may run anywhere: asked when it
        # runs, so the setup block need not come first.
        setup.guards_used.add(GUARD)
        edits.expressions[body] = _on_rank0(edits, GUARD)
        edits.standalone.add(body)
    edits.report("DDP317", body)
    for read in _reads_of_models_handed_in(facts, lambda_node):
        if read not in edits.expressions:
            edits.expressions[read] = replacement(edits, f'getattr({read.value}, "module", {read.value})')
            edits.standalone.add(read)
            edits.report("DDP103", read)


def _reads_of_models_handed_in(facts: Facts, lambda_node: cst.Lambda) -> list[cst.Name]:
    """The parameters of the lambda that may be handed the DDP wrapper, where the body reads
    them (`net.state_dict()`, `net[0].weight`): one whose state dict it reads, and one that a
    call of the lambda's name hands a model (`save_weights = lambda net: ...` then
    `save_weights(model)`). The body runs on rank 0 alone, so it reads the module itself."""
    parameters = [param.name.value for param in lambda_node.params.params]
    handed = {access.value.value for access in _state_dict_reads(lambda_node.body)
              if isinstance(access.value, cst.Name) and access.value.value in parameters}
    models = {model.name for model in facts.models}
    assignment = facts.parents.get(lambda_node)
    if isinstance(assignment, cst.Assign) and len(assignment.targets) == 1:
        bound = dotted_name(assignment.targets[0].target)
        for call in facts.calls_by_callee.get(bound or "", ()):
            handed.update(parameters[position] for position, arg in enumerate(call.args[:len(parameters)])
                          if arg.keyword is None and not arg.star and dotted_name(arg.value) in models)
    return [node for node in _names_within(lambda_node.body) if node.value in handed and _read_from(facts, node)]


def _read_from(facts: Facts, name: cst.Name) -> bool:
    """`net.x` or `net[i]`: something of the value read, not the value handed on whole."""
    parent = facts.parents.get(name)
    return isinstance(parent, (cst.Attribute, cst.Subscript)) and parent.value is name


def _names_within(node: cst.CSTNode) -> Iterator[cst.Name]:
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Name):
            yield current
        elif not isinstance(current, cst.Attribute):
            stack.extend(current.children)
        else:
            stack.append(current.value)  # (not the attribute's own name: `x.net` reads no `net`)


def _rank_zero_test(test: cst.BaseExpression) -> bool:
    """`is_main`, `is_main_process()`, `rank == 0`: what a rank-0 guard asks."""
    if isinstance(test, cst.Call):
        test = test.func
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        value = test.comparisons[0].comparator
        return isinstance(value, cst.Integer) and value.value == "0" and "rank" in (dotted_name(test.left) or "")
    return (dotted_name(test) or "").rsplit(".", 1)[-1] in _RANK_ZERO_FLAGS


def _on_rank0(edits: Edits, guard: str) -> Rewrite:
    def rewrite(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.BaseExpression)
        return cst.IfExp(test=edits.expression(guard), body=node, orelse=cst.Name("None"),
                         whitespace_before_if=cst.SimpleWhitespace(" "), whitespace_after_if=cst.SimpleWhitespace(" "),
                         whitespace_before_else=cst.SimpleWhitespace(" "),
                         whitespace_after_else=cst.SimpleWhitespace(" "))
    return rewrite


def _state_dict_reads(node: cst.CSTNode) -> Iterator[cst.Attribute]:
    """`net.state_dict` in `net.state_dict()`, anywhere inside node."""
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Call) and isinstance(current.func, cst.Attribute) \
                and current.func.attr.value in _STATE_METHODS:
            yield current.func
        stack.extend(current.children)


def _guard_handing_on(facts: Facts, edits: Edits, setup: Plan, value: cst.BaseExpression) -> None:
    """Rule: `pool.submit(torch.save, state, path)` on a line of its own is guarded whole;
    `writer = Thread(target=torch.save, ...)` with every use of `writer` (side_effects'
    _guard_object); anything else is reported (DDP936)."""
    call = _call_handed(facts, value)
    if call is None or not guard_writing_call(facts, edits, setup, call, "DDP318"):
        edits.report("DDP936", value, f"`{edits.code(value)}` is handed on here and runs later on every rank: "
                     "ddpify cannot put that on rank 0 alone; hand it on only on rank 0 (`if is_main:`)")


def _call_handed(facts: Facts, value: cst.BaseExpression) -> Optional[cst.Call]:
    arg = facts.parents.get(value)
    call = facts.parents.get(arg) if isinstance(arg, cst.Arg) else None
    return call if isinstance(call, cst.Call) else None


CASES = (
    Emits(TRAINING.replace("    print(epoch, loss.item())\n",
                           "    save = lambda: torch.save(model.state_dict(), 'last.pt')\n    save()\n"),
          "DDP317", ("torch.save(getattr(model, \"module\", model).state_dict(), 'last.pt') if is_main_process() "
                     "else None",)),
    Emits(TRAINING.replace("    print(epoch, loss.item())\n",
                           "    snap = lambda net: torch.save(net.state_dict(), 'last.pt')\n    snap(model)\n"),
          "DDP317", ('torch.save(getattr(net, "module", net).state_dict(), \'last.pt\') if is_main_process() '
                     "else None",)),
    Emits(TRAINING.replace("    print(epoch, loss.item())\n",
                           "    show = lambda: print(loss.item())\n    show()\n"), "DDP317",
          ("show = lambda: print(loss.item()) if is_main_process() else None",)),
    Silent(TRAINING.replace("    print(epoch, loss.item())\n",
                            "    show = lambda: loss.item()\n    print(show())\n"), "DDP317"),
    # A lambda that only opens a file hands back a file object: side_effects.py opens os.devnull
    # on the other ranks instead.
    Silent(TRAINING.replace("    print(epoch, loss.item())\n",
                            "    log = lambda: open('log.txt', 'a')\n    log().write(str(epoch))\n"), "DDP936"),
    Emits(TRAINING.replace("import torch\n", "from concurrent.futures import ThreadPoolExecutor\n\nimport torch\n", 1)
          .replace("for epoch", "pool = ThreadPoolExecutor(1)\nfor epoch")
          .replace("    print(epoch, loss.item())\n", "    pool.submit(torch.save, model.state_dict(), 'last.pt')\n"),
          "DDP318", ("    if is_main:\n        pool.submit(torch.save",)),
    # A bound method that writes the path it is given, handed to a thread.
    Emits(TRAINING.replace("import torch\n", "import threading\n\nimport torch\n", 1)
          .replace("    print(epoch, loss.item())\n",
                   "    threading.Thread(target=history.to_csv, args=('loss.csv',)).start()\n")
          .replace("for epoch", "history = None\nfor epoch"), "DDP318",
          ("    if is_main:\n        threading.Thread(",)),
    # A model run inside the write stays on every rank (its forward is a collective under DDP).
    Emits(TRAINING.replace("    print(epoch, loss.item())\n",
                           "    dump = lambda: torch.save(model(x), 'out.pt')\n    dump()\n"), "DDP936"),
    Emits(TRAINING.replace("    print(epoch, loss.item())\n",
                           "    copy = lambda: shutil.copy('a.pt', 'b.pt')\n    copy()\n").replace(
                               "import torch\n", "import shutil\n\nimport torch\n", 1), "DDP936"),
)
