"""Checkpoints under N ranks: each rank loads onto its own device (DDP303), and a rank that
reads a file rank 0 wrote waits until rank 0 has written it (DDP309).

The save itself is rank 0's (side_effects.py guards it, DDP302); which statements run on
rank 0 only comes from the plan (`rank0_statements`), never from that rule's edits.
"""
from typing import Optional, cast

import libcst as cst

from ddpify.analysis import effects, names
from ddpify.analysis.control import Facts
from ddpify.analysis.facts import Statement
from ddpify.analysis.nodes import argument_for, dotted_name, string_value
from ddpify.diagnostics import Rule, Severity
from ddpify.emit.arguments import with_keyword
from ddpify.emit.edits import Edits, Insertion
from ddpify.plan import Plan
from ddpify.rules.cases import TRAINING, Emits, Silent

RULES = (
    Rule("DDP303", Severity.EDIT, "torch.load maps tensors to this rank's device",
         "A checkpoint saved from GPU 0 loads onto GPU 0 on every rank unless map_location "
         "says otherwise.",
         "Nothing to do."),
    Rule("DDP309", Severity.EDIT, "barrier before reading a file rank 0 wrote",
         "Only rank 0 saves; the other ranks would read the checkpoint before it exists, or "
         "while it is half written.",
         "Nothing to do."),
)

BARRIER_CODE = """\
if {condition}:
    dist.barrier()  # rank 0 has finished writing what is read next
"""


def plan(facts: Facts, edits: Edits, setup: Plan) -> None:
    waiting = _barrier_before_reading_saved_files(facts, edits, setup)
    _barrier_before_reading_written_paths(facts, edits, setup, waiting)
    for call in facts.load_calls:
        if call in setup.collective_loads:
            continue  # dcp.load: each rank reads its own shards, after a save every rank joined
        if any(arg.keyword is not None and arg.keyword.value == "map_location" for arg in call.args):
            continue
        # The rank's device where the setup's own code loads; elsewhere (a function that
        # may run before the setup, such as a dataset's __init__) the CPU, which is always there.
        # (With the device chosen in another module, or none at all, no device is named here.)
        in_setup_scope = setup.sees_setup(facts, call) and facts.function_of(call) is setup.function \
            and not setup.device_elsewhere and not setup.cpu_only
        location = setup.device if in_setup_scope else '"cpu"'
        edits.expressions[call] = with_keyword("map_location", location, edits)
        edits.report("DDP303", call)


def _barrier_before_reading_saved_files(facts: Facts, edits: Edits, setup: Plan) -> set[Statement]:
    """Only rank 0 saves; a rank that loads a checkpoint after that must wait until rank 0
    has written it (or it reads a missing or half-written file). A call of a function of
    another module of the project that loads with torch.load (a second script's main()
    reading the backbone this one saved) is such a load too. Returns where it waits."""
    waiting: set[Statement] = set()
    for call in [*facts.load_calls, *facts.helper_load_calls]:
        if call in setup.collective_loads:
            continue
        if not any(_saved_before(facts, save, call) and _on_rank0_only(facts, setup, save)
                   for save in _writes(facts)):
            continue
        statement: Statement = facts.statement_of(call)
        # `with open(path, "rb") as f: model = torch.load(f)`, also with another `with`
        # between them (safe_globals): wait before the open.
        current: Statement = statement
        while isinstance(facts.parents.get(current), cst.IndentedBlock) and isinstance(
                facts.parents.get(facts.parents[current]), cst.With):
            current = cast(cst.With, facts.parents[facts.parents[current]])  # just checked
            if _opens_a_file(facts, current):
                statement = current
        condition = "distributed" if setup.sees_setup(facts, statement) else "dist.is_initialized()"
        edits.before.setdefault(statement, []).append(
            Insertion(edits.statements(BARRIER_CODE.format(condition=condition)), takes_comments=True))
        edits.imports.add("dist")
        edits.report("DDP309", statement)
        waiting.add(statement)
    return waiting


def _opens_for_writing(call: cst.Call) -> bool:
    mode = argument_for(call, "mode", 1)
    text = string_value(mode) if mode is not None else None
    return text is not None and any(letter in text for letter in "wax")


# Calls that name a path without reading the file (or that only rank 0 makes anyway).
_NOT_READS = frozenset({"os.path.join", "os.path.basename", "os.path.dirname", "os.path.splitext",
                        "builtins.print", "builtins.str"})


def _barrier_before_reading_written_paths(facts: Facts, edits: Edits, setup: Plan,
                                         waiting: set[Statement]) -> None:
    """Rule: a file that rank 0 alone writes (`json.dump(results, open(path, "w"))`, `with
    open(path, "w")`, `torch.save(obj, path)`, put on rank 0 by side_effects.py) and that
    the same function then hands, by the same path expression, to a call on every rank
    (`coco.loadRes(path)`, `score(path)`): the other ranks would read it before rank 0 has
    written it, or last epoch's copy. A barrier goes before the reading statement (DDP309),
    as before a torch.load of a saved checkpoint. Not again where that rule waits already,
    nor before a call of a function that loads (it waits inside)."""
    opens = [call for qualified in sorted(names.OPEN) for call in facts.calls_named.get(qualified, ())]
    write_calls = [call for call in opens if _opens_for_writing(call)] + list(facts.save_calls)
    loads = set(facts.load_calls) | set(facts.helper_load_calls) | {
        call for load in facts.load_calls for loader in [facts.function_of(load)] if loader is not None
        for call in facts.calls_of(loader)}
    not_reads = {call for qualified in _NOT_READS for call in facts.calls_named.get(qualified, ())}
    done: set[Statement] = set(waiting)
    # (A function that downloads runs its files on local rank 0 while the others wait at
    # downloads.py's barrier: another barrier there would pair with that one.)
    downloading = {facts.function_of(statement) for statement in facts.download_statements}
    for write in write_calls:
        function = facts.function_of(write)
        if not _on_rank0_only(facts, setup, write) or function in downloading:
            continue
        # The file: open's first argument, torch.save's second (json.dump and the like write
        # to an open() of their own).
        is_open = write not in facts.save_calls
        path = argument_for(write, "file" if is_open else "f", 0 if is_open else 1)
        if path is None or not (isinstance(path, (cst.SimpleString, cst.FormattedString, cst.Name, cst.Attribute,
                                                  cst.ConcatenatedString)) or _path_made_of_names(path)):
            continue
        paths = {edits.code(path)}
        for calls in facts.calls_by_callee.values():
            for call in calls:
                if call in loads or facts.function_of(call) is not function or facts.line_of(call) <= facts.line_of(
                        write) or _on_rank0_only(facts, setup, call) or call in not_reads:
                    continue
                if not any(not arg.star and edits.code(arg.value) in paths for arg in call.args):
                    continue
                statement: Statement = facts.statement_of(call)
                if statement in done:
                    continue
                done.add(statement)
                condition = "distributed" if setup.sees_setup(facts, statement) else "dist.is_initialized()"
                edits.before.setdefault(statement, []).append(
                    Insertion(edits.statements(BARRIER_CODE.format(condition=condition)), takes_comments=True))
                edits.imports.add("dist")
                edits.report("DDP309", statement)


def _path_made_of_names(path: Optional[cst.BaseExpression]) -> bool:
    """`"{}_results.json".format(dataset.set_name)`, `os.path.join(out_dir, "preds.json")`: a
    path put together from names and strings, the same file wherever it is written alike."""
    if not isinstance(path, cst.Call) or not isinstance(path.func, cst.Attribute):
        return False
    joined = path.func.attr.value == "join" and dotted_name(path.func.value) in ("os.path", "osp", "path")
    formatted = path.func.attr.value == "format" and isinstance(path.func.value, cst.SimpleString)
    return (joined or formatted) and all(
        not arg.star and isinstance(arg.value, (cst.SimpleString, cst.Name, cst.Attribute)) for arg in path.args)


def _opens_a_file(facts: Facts, node: Optional[cst.CSTNode]) -> bool:
    """`with open(path, "rb") as f:`, not any with (a TemporaryDirectory holds the load)."""
    opens = {call for qualified in names.OPEN for call in facts.calls_named.get(qualified, ())}
    return isinstance(node, cst.With) and any(item.item in opens for item in node.items)


def _writes(facts: Facts) -> list[cst.Call]:
    """torch.save calls and calls of the project's helpers that write files."""
    return facts.save_calls + [call for call, effect in facts.helper_effects.items() if effect == effects.WRITES]


def _on_rank0_only(facts: Facts, setup: Plan, node: cst.CSTNode) -> bool:
    current: Optional[cst.CSTNode] = node
    while current is not None:
        if current in setup.rank0_statements:
            return True
        current = facts.parents.get(current)
    return False


def _saved_before(facts: Facts, save: cst.Call, load: cst.Call) -> bool:
    """The save runs before the load: earlier in the same function (or both at module
    level), or inside a function called earlier in the load's function."""
    load_function = facts.function_of(load)
    save_function = facts.function_of(save)
    if save_function is load_function and facts.line_of(save) < facts.line_of(load):
        return True
    # `torch.save(init, path)` then `build_model(name, pretrained=path)`, whose body loads
    # it: the save comes before a call of the load's function in the save's own scope.
    if load_function is not None and any(
            facts.function_of(call) is save_function and facts.line_of(save) < facts.line_of(call)
            for call in facts.calls_of(load_function)):
        return True
    if save_function is None:
        return False
    if any(facts.function_of(call) is load_function and facts.line_of(call) < facts.line_of(load)
           for call in facts.calls_of(save_function)):
        return True
    # `train(resume=False)` then `train(resume=True)`, `train()` then `resume()`, or
    # `save_checkpoint(...)` in the epoch loop then `load_checkpoint(path)` after it: a call
    # that saves runs before a call that loads, in the loading call's block or in a statement
    # of it that comes first (not the two branches of `if args.subcommand == "train": ...
    # else: ...`).
    return any(_runs_before(facts, saving, loading)
               for saving in facts.calls_of(save_function) for loading in facts.calls_of(load_function))


def _runs_before(facts: Facts, first: cst.Call, then: cst.Call) -> bool:
    """`first` sits in a statement of `then`'s block that comes before `then`'s statement, or
    in that block itself before it: the path to `then` has passed `first`."""
    loading = facts.statement_of(then)
    earlier = facts.ancestor_in(first, facts.block_of(loading))
    return earlier is not None and earlier is not loading and facts.line_of(first) < facts.line_of(then)


_CHECKPOINT = TRAINING + 'torch.save(model.state_dict(), "model.pt")\n'

CASES = (
    Emits(TRAINING.replace("optimizer = torch", 'model.load_state_dict(torch.load("model.pt"))\noptimizer = torch'),
          "DDP303", ("map_location=",)),
    # A script that never names a device: the setup names none either, so the CPU.
    Emits(TRAINING.replace('device = torch.device("cuda" if torch.cuda.is_available() else "cpu")\n', "")
          .replace(".to(device)", "")
          .replace("optimizer = torch", 'model.load_state_dict(torch.load("model.pt"))\noptimizer = torch'),
          "DDP303", ('torch.load("model.pt", map_location="cpu")',)),
    Emits(_CHECKPOINT + 'model.load_state_dict(torch.load("model.pt"))\n', "DDP309", ("dist.barrier()",)),
    Silent(_CHECKPOINT, "DDP309"),
)
