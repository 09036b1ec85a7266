"""Checkpoints under N ranks: each rank loads onto its own device (DDP303), and a rank that
reads a file rank 0 wrote waits until rank 0 has written it (DDP309).

The save itself is rank 0's (side_effects.py guards it, DDP302); which statements run on
rank 0 only comes from the plan (`rank0_statements`), never from that rule's edits.
"""
from collections.abc import Sequence
from typing import Optional, cast

import libcst as cst

from ddpify.analysis import effects, names, shell
from ddpify.analysis.control import Facts
from ddpify.analysis.effects import MODULE_ONLY_METHODS
from ddpify.analysis.facts import Statement
from ddpify.analysis.navigation import ancestors_up_to
from ddpify.analysis.nodes import (
    argument_for,
    calls_within,
    dotted_name,
    find_all,
    handed_for,
    names_in,
    opens_for_writing,
    positional_parameters,
    string_value,
)
from ddpify.analysis.path_shapes import has_a_written_part, may_be_within, path_fields, path_shape
from ddpify.diagnostics import Rule, Severity
from ddpify.emit.arguments import with_keyword
from ddpify.emit.edits import Edits, Insertion
from ddpify.plan import Plan
from ddpify.rules.cases import TRAINING, Emits, Silent
from ddpify.rules.machine_local import REMOVALS, machine_local_names
from ddpify.rules.side_effects import image_saves, logger_names

RULES = (
    Rule("DDP303", Severity.EDIT, "torch.load maps tensors to this rank's device",
         "A checkpoint saved from GPU 0 loads onto GPU 0 on every rank unless map_location "
         "says otherwise.",
         "Nothing to do."),
    Rule("DDP309", Severity.EDIT, "barrier before reading a file rank 0 wrote",
         "Only rank 0 saves; the other ranks would read the checkpoint before it exists, or "
         "while it is half written.",
         "Nothing to do."),
    Rule("DDP323", Severity.EDIT, "barrier on every pass before reading a file rank 0 writes later in the pass",
         "A file rank 0 saves at an epoch's end (the best weights, an EMA copy, the epoch's "
         "statistics) and every rank reads at the next epoch's start: a barrier before the loop "
         "orders the first read only. On the next pass another rank may read it while rank 0 is "
         "still writing it (a truncated file) or before it starts (the old weights). The barrier "
         "goes before the read, in the loop, once per pass.",
         "Nothing to do."),
    Rule("DDP324", Severity.EDIT, "barrier before rank 0 deletes what every rank has read",
         "Only rank 0 deletes (`shutil.rmtree(scratch)`, `os.remove(old_checkpoint)`); a rank "
         "still loading from that file or folder on a shared file system finds it gone. Every "
         "rank waits after its read, before rank 0 deletes.",
         "Nothing to do."),
    Rule("DDP314", Severity.WARNING, "file rank 0 writes read in a branch chosen by a file test",
         "`if not os.path.exists(path): <write, rank 0 only> else: <read>`: while rank 0 writes, "
         "ranks may take different branches, and a barrier in one of them would wait forever.",
         "Write on rank 0 first, then `dist.barrier()` on every rank, then read on every rank "
         "(the read left as it was here)."),
)

BARRIER_CODE = """\
if {condition}:
    dist.barrier()  # {why}
"""
WRITTEN = "rank 0 has finished writing what is read next"
READ = "every rank has read what rank 0 deletes next"


def plan(facts: Facts, edits: Edits, setup: Plan) -> None:
    waiting = _barrier_before_reading_saved_files(facts, edits, setup)
    _barrier_before_reading_written_paths(facts, edits, setup, waiting)
    _barrier_before_deleting_what_ranks_read(facts, edits, setup, waiting)
    for call in facts.load_calls:
        if call in setup.collective_loads:
            continue  # dcp.load: each rank reads its own shards, after a save every rank joined
        if _map_location_given(call):
            continue
        # The rank's device where the setup's own code loads; elsewhere (a function that
        # may run before the setup, such as a dataset's __init__) the CPU, which is always there.
        # (With the device chosen in another module, or none at all, no device is named here.)
        in_setup_scope = setup.sees_setup(facts, call) and facts.function_of(call) is setup.function \
            and not setup.device_elsewhere and not setup.cpu_only
        # (torch.load takes no int: a GPU index kept as the device goes through torch.device.)
        location = (f"torch.device({setup.device})" if setup.device_is_index else setup.device) \
            if in_setup_scope else '"cpu"'
        if not in_setup_scope and (_module_used_in_place(facts, call) or _optimizer_unpickled(facts, call)):
            location = "on_this_process_device"
            edits.add_helper(location, ON_THIS_PROCESS_DEVICE_HELPER, "torch")
        edits.expressions[call] = with_keyword("map_location", location, edits)
        edits.report("DDP303", call)


def _map_location_given(load: cst.Call) -> bool:
    """`map_location=...`, or torch.load's second positional argument, which is map_location
    (`torch.load(args.resume, "cpu")`): a keyword added beside it would raise "got multiple
    values for argument 'map_location'" on every rank. A `**options` may hold it too."""
    positional = [arg for arg in load.args if arg.keyword is None and not arg.star]
    return len(positional) >= 2 or any(
        arg.star == "**" or (arg.keyword is not None and arg.keyword.value == "map_location") for arg in load.args)


ON_THIS_PROCESS_DEVICE_HELPER = '''\


def on_this_process_device(storage, location):
    """torch.load's map_location for whole pickled objects (a module, an optimizer and its
    state): what was saved on GPU N comes back on this process's own GPU (the one the
    setup's set_device chose), the rest where it was saved; one process alone gets what the
    original got from a checkpoint of GPU 0."""
    return torch.serialization.default_restore_location(storage, location.split(":")[0])
'''


def _module_used_in_place(facts: Facts, load: cst.Call) -> bool:
    """`teacher = torch.load(path)` then `teacher.eval()` or `teacher(x)`, never moved in that
    function: a whole module used where it was unpickled. Mapped to the CPU it would meet
    inputs on this rank's GPU, where the original had it on the GPU it was saved from; so
    its GPU tensors come to this process's GPU instead. (A state dict or a checkpoint dict,
    or a module moved afterwards, keeps map_location="cpu".)

    Through a returned value too: `def load_model(p): return torch.load(p)` (or `m =
    torch.load(p)` ... `return m`), when every call of that function of this file assigns
    the result to a name its caller uses in place as above (`m = load_model(p); m.eval()`).
    A call whose result goes anywhere else leaves it uncertain: "cpu" is kept."""
    parent = facts.parents.get(load)
    function = facts.function_of(load)
    if isinstance(parent, cst.Return) and parent.value is load:
        return _returned_to_callers_using_it(facts, function)
    if not isinstance(parent, cst.Assign) or parent.value is not load or len(parent.targets) != 1:
        return False
    name = dotted_name(parent.targets[0].target)
    if name is None:
        return False
    if _used_in_place(facts, name, function):
        return True
    returned = [ret for ret in facts.own_statements(function, cst.Return)
                if ret.value is not None and dotted_name(ret.value) == name]
    return bool(returned) and not _moved_in(facts, name, function) and _returned_to_callers_using_it(facts, function)


def _optimizer_unpickled(facts: Facts, load: cst.Call) -> bool:
    """Rule: `checkpoint = torch.load(path)` then `optimizer = checkpoint["optimizer"]` (or
    `optimizer = torch.load(path)`), where the checkpoint holds the optimizer object itself
    (`torch.save({"model": model, "optimizer": optimizer}, path)`) and the name then steps
    (an optimizer is built under it elsewhere, or `.step()` / `.zero_grad()` is called on it).
    Unpickled, its state (momentum, Adam's moments) stays where map_location put it: no
    load_state_dict moves it next to the parameters, as it does for a state dict. Mapped to
    the CPU, it would meet the parameters on this rank's GPU at the first step, where the
    original had both on the GPU it saved from; so its GPU tensors come to this process's GPU."""
    function = facts.function_of(load)
    parent = facts.parents.get(load)
    if isinstance(parent, cst.Subscript) and parent.value is load:
        parent = facts.parents.get(parent)
        return isinstance(parent, cst.Assign) and _steps_as_optimizer(facts, parent.targets)
    if not isinstance(parent, cst.Assign) or parent.value is not load or len(parent.targets) != 1:
        return False
    if _steps_as_optimizer(facts, parent.targets):
        return True
    loaded = dotted_name(parent.targets[0].target)
    return loaded is not None and any(
        isinstance(assign.value, cst.Subscript) and dotted_name(assign.value.value) == loaded
        and _steps_as_optimizer(facts, assign.targets) for assign in facts.own_statements(function, cst.Assign))


def _steps_as_optimizer(facts: Facts, targets: Sequence[cst.AssignTarget]) -> bool:
    names = {dotted_name(target.target) for target in targets}
    return any(name is not None and (name in facts.optimizer_names or any(
        read.attr.value in ("step", "zero_grad") and _is_called(facts, read)
        for read in facts.attribute_reads.get(name, ()))) for name in names)


def _returned_to_callers_using_it(facts: Facts, function: Optional[cst.FunctionDef]) -> bool:
    calls = facts.calls_of(function)
    if function is None or not calls:
        return False
    for call in calls:
        assign = facts.parents.get(call)
        if not isinstance(assign, cst.Assign) or assign.value is not call or len(assign.targets) != 1:
            return False
        name = dotted_name(assign.targets[0].target)
        if name is None or not _used_in_place(facts, name, facts.function_of(call)):
            return False
    return True


def _used_in_place(facts: Facts, name: str, function: Optional[cst.FunctionDef]) -> bool:
    called = [read.attr.value for read in facts.attribute_reads.get(name, ())
              if facts.function_of(read) is function and _is_called(facts, read)]
    runs = any(facts.function_of(call) is function for call in facts.calls_by_callee.get(name, ()))
    return (runs or any(method in MODULE_ONLY_METHODS for method in called)
            or _run_by_a_function_it_is_handed_to(facts, name, function)) and not any(
        method in MOVES for method in called)


def _moved_in(facts: Facts, name: str, function: Optional[cst.FunctionDef]) -> bool:
    return any(read.attr.value in MOVES for read in facts.attribute_reads.get(name, ())
               if facts.function_of(read) is function and _is_called(facts, read))


def _run_by_a_function_it_is_handed_to(facts: Facts, name: str, function: Optional[cst.FunctionDef]) -> bool:
    """`print(generate(decoder, "Wh"))` where this file's `def generate(decoder, prime):`
    calls `decoder(...)` and never moves it."""
    for callee, calls in facts.calls_by_callee.items():
        defined = facts.functions.get(callee)
        if defined is None:
            continue
        for call in calls:
            if facts.function_of(call) is not function:
                continue
            for parameter in positional_parameters(defined):
                handed = handed_for(call, defined, parameter)
                if handed is not None and dotted_name(handed) == name and _runs_unmoved(defined, parameter):
                    return True
    return False


def _runs_unmoved(function: cst.FunctionDef, parameter: str) -> bool:
    inner = calls_within(function.body)
    return any(isinstance(call.func, cst.Name) and call.func.value == parameter for call in inner) and not any(
        isinstance(call.func, cst.Attribute) and call.func.attr.value in MOVES
        and dotted_name(call.func.value) == parameter for call in inner)


# Methods that put a module where it is used, after which the CPU copy is moved anyway.
MOVES = frozenset({"to", "cuda", "cpu", "to_empty", "load_state_dict"})


def _is_called(facts: Facts, read: cst.Attribute) -> bool:
    call = facts.parents.get(read)
    return isinstance(call, cst.Call) and call.func is read


def _barrier_before_reading_saved_files(facts: Facts, edits: Edits, setup: Plan) -> set[Statement]:
    """Only rank 0 saves; a rank that loads a checkpoint after that must wait until rank 0
    has written it (or it reads a missing or half-written file). The same for a file opened
    for reading after rank 0 alone wrote one (`write_samples(path)` then a dataset whose
    __init__ reads it), where the open runs once per rank (_reads_once). A call of a function
    of another module of the project that loads with torch.load (a second script's main()
    reading the backbone this one saved) is such a load too. Returns where it waits."""
    reads = [call for call in [*facts.load_calls, *facts.helper_load_calls, *_pretrained_folder_reads(facts)]
             if not _read_by_rank0_alone(facts, setup, call)] + [
        call for call in [*_opens(facts), *_data_reads(facts)] if _reads_once(facts, setup, call)] + list(
        _calls_in_loops_of_reading_functions(facts, setup))
    datasets = _datasets_reading_later(facts, setup)
    # (A dataset that lists its folder in __init__ and loads each file per item: the one
    # barrier before it is made covers both reads.)
    made_before = {name for call in datasets if (name := dotted_name(call.func)) is not None}
    # (In the order they first run, so that a later read can find the barrier an earlier one
    # placed: _waited_for_already.)
    reads = sorted(datasets + [call for call in reads if not _in_init_of(facts, call, made_before)],
                   key=lambda call: _first_run(facts, call))
    waiting: set[Statement] = set()  # (`with open(path, "rb") as f: torch.load(f)`: one barrier)
    placed: list[Statement] = []
    for call in reads:
        if call in setup.collective_loads:
            continue
        # (A call of a helper that trains on every rank and writes on rank 0 inside, in the
        # helper's own migration, counts as a write rank 0 alone makes.)
        rank0_writes = [save for save in _writes(facts)
                        if _on_rank0_only(facts, setup, save) or save in facts.helper_write_calls]
        # (Written later in a loop that holds the read too: read again on the next pass, DDP323.)
        # (Not a call of another module's function that both writes and reads: `train_loop(fold)`
        # saving the fold's best weights and loading them back waits inside, between the two.)
        carried = [save for save in rank0_writes if save is not call and not _saved_before(facts, save, call)
                   and _written_on_a_later_pass(facts, call, save)]
        writes = [save for save in rank0_writes if _saved_before(facts, save, call)] + carried
        # (In a loop that holds both, only a write that may name the file read: a barrier per
        # pass, per book of a corpus read in turn, is a cost where the loop saves checkpoints.)
        writes = [save for save in writes if _innermost_loop_with(facts, call, [save]) is None
                  or _may_name_the_same_file(facts, save, call)]
        if not writes:
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
        loop = _loop_around_read(facts, call) if call not in datasets else None
        if loop is not None:
            # Written in a loop that holds the read too (each epoch's checkpoint read back in
            # that epoch, or the best weights saved at an epoch's end and reloaded at the next
            # one's start): the wait goes inside that loop, before the read or the loop around
            # it there, so that it runs on every pass, after every write of the pass before.
            shared = _innermost_loop_with(facts, call, writes)
            statement = loop if shared is None else (_loop_around_read(facts, call, within=shared) or statement)
        if statement in waiting or _waited_for_already(facts, placed, writes, call) \
                or _waited_for_in_this_pass(facts, placed, writes, statement):
            continue
        # (Before what other rules put above a dataset's statement too: its sampler calls
        # __len__, which may read the file; and a dataset read inside the loader's call,
        # `DataLoader(load_blobs(root))`, is hoisted above the loader with its sampler.)
        first = call in datasets or any(facts.ancestor_in(call, loader) is not None for loader in facts.loader_calls
                                        if loader is not call)
        waited = _wait_before(facts, edits, setup, statement, writes, first=first, waited_at=waiting,
                              code="DDP323" if carried else "DDP309")
        waiting.add(statement)
        if waited is not None:
            waiting.add(waited)
            placed.append(waited)
    return waiting


def _first_run(facts: Facts, node: cst.CSTNode) -> int:
    """The line where `node` first runs: its own, or that of the first call of its function."""
    callers = _calls_of(facts, facts.function_of(node))
    return min([facts.line_of(caller) for caller in callers], default=facts.line_of(node))


def _waited_for_already(facts: Facts, placed: list[Statement], writes: list[cst.Call], read: cst.Call) -> bool:
    """Rule: one barrier serves every later read of what rank 0 wrote before it. A read in a
    function of this file whose every call comes after a barrier already placed in that
    call's block, where every write it waits for has run before that barrier, needs no
    second one (`predict_folder(model, "test_images")` after the barrier before the training
    set is made, both folders written by `fake_folder` calls before it)."""
    function = facts.function_of(read)
    callers = _calls_of(facts, function)
    return function is not None and bool(callers) and all(any(
        _comes_after(facts, place, caller) and all(_written_before(facts, write, place) for write in writes)
        for place in placed) for caller in callers)


def _comes_after(facts: Facts, place: Statement, node: cst.CSTNode) -> bool:
    """`node` runs after the barrier placed before `place`: in `place` or a later statement of its block."""
    holder = facts.ancestor_in(node, facts.block_of(place))
    return holder is not None and facts.line_of(holder) >= facts.line_of(place)


def _written_before(facts: Facts, write: cst.Call, place: Statement) -> bool:
    """The write runs before `place` and not after it: in an earlier statement of its block,
    or in a function that calls in such statements reach, and in no later one (a checkpoint
    saved again after the barrier needs a barrier of its own)."""
    block = facts.block_of(place)
    function = facts.function_of(write)
    reaching = [write] + (_calls_reaching(facts, function) if function is not None else [])
    lines = [facts.line_of(holder) for node in reaching if (holder := facts.ancestor_in(node, block)) is not None]
    return bool(lines) and all(line < facts.line_of(place) for line in lines)


def _in_init_of(facts: Facts, call: cst.Call, classes: set[str]) -> bool:
    function = facts.function_of(call)
    owner = facts.class_of(function)
    return function is not None and function.name.value == "__init__" and owner is not None \
        and owner.name.value in classes


# Calls whose result tells whether a file or folder is there (`os.path.exists(path)`,
# `Path(path).is_file()`, `os.listdir(folder)`), by the name of the function or method.
_FILE_TESTS = frozenset({"exists", "lexists", "isfile", "isdir", "is_file", "is_dir", "listdir", "glob", "iglob"})


def _wait_before(facts: Facts, edits: Edits, setup: Plan, statement: Statement,
                 writes: list[cst.Call], first: bool = False,
                 waited_at: frozenset[Statement] | set[Statement] = frozenset(),
                 code: str = "DDP309") -> Optional[Statement]:
    """A barrier before the statement, so that every rank reads what rank 0 has finished
    writing (DDP309); where it waits, or None.

    Rule: a barrier is a collective, so every rank must reach it the same number of times.
    A read under an `if` that tests whether the file is there (`if os.path.exists(path):`)
    is not: while rank 0 writes, one rank may find the file and another not. The barrier
    goes before the outermost such `if` of the function instead, where every rank passes,
    when the write comes before that `if`; when the write is inside it (`if not
    exists(path): download and write, else: read`), no place is certain and the read is
    reported (DDP314), left as it was. One barrier before an `if` that guards several reads
    (`if os.path.exists(ckpt_dir):` loading the model, then the optimizer): `waited_at` holds
    where a barrier already waits."""
    tests = [node for node in ancestors_up_to(facts.parents, statement, facts.function_of(statement))
             if isinstance(node, cst.If) and _tests_files(node.test)]
    if tests:
        outermost = cast(cst.If, tests[-1])
        if any(_ancestor_of(facts, outermost, write) for write in writes):
            edits.report("DDP314", statement)
            return None
        statement = outermost
    if statement in waited_at:
        return statement
    condition = "distributed" if setup.sees_setup(facts, statement) else "dist.is_initialized()"
    why = READ if code == "DDP324" else WRITTEN
    barrier = Insertion(edits.statements(BARRIER_CODE.format(condition=condition, why=why)), takes_comments=True)
    edits.insert_before(statement, barrier, first=first)
    edits.imports.add("dist")
    edits.report(code, statement)
    return statement


def _ancestor_of(facts: Facts, container: cst.CSTNode, node: cst.CSTNode) -> bool:
    return container in ancestors_up_to(facts.parents, node, None)


def _tests_files(test: cst.BaseExpression) -> bool:
    return any(isinstance(call.func, (cst.Attribute, cst.Name)) and (dotted_name(call.func) or "").rpartition(".")[2]
               in _FILE_TESTS for call in calls_within(test))


# Calls that name a path without reading the file (or that only rank 0 makes anyway).
_NOT_READS = frozenset({"os.path.join", "os.path.basename", "os.path.dirname", "os.path.splitext",
                        "os.path.abspath", "os.path.realpath", "os.path.relpath", "os.path.normpath",
                        "builtins.print", "builtins.str", "builtins.repr", "tqdm.tqdm.write", "tqdm.auto.tqdm.write"})


def _only_tells(facts: Facts, call: cst.Call, loggers: set[str]) -> bool:
    """Rule: `logger.info("saved checkpoint to %s", path)` (a logger of `logging.getLogger`, or
    one named so: `log`, `self.logger`) and `"saved to {}".format(path)` tell where the file
    went and never open it, as print does (_NOT_READS): no barrier before them. A barrier is
    a collective every rank must reach: one that guards no read is a cost and a hang risk."""
    func = call.func
    if not isinstance(func, cst.Attribute):
        return False
    if func.attr.value == "format" and isinstance(func.value, (cst.SimpleString, cst.ConcatenatedString)):
        return True
    receiver = dotted_name(func.value)
    if receiver is None or func.attr.value not in effects.LOG_METHODS:
        return False
    last = receiver.split(".")[-1].lower().strip("_")
    return receiver in loggers or last in ("log", "logging") or last.endswith("logger")


# Methods that put a value in a list or deque (`saved.append(path)`, to prune later): no read.
_STORING_METHODS = frozenset({"append", "appendleft", "extend", "insert"})


def _only_stores(call: cst.Call) -> bool:
    """`saved.append(path)` keeps the path's name and never opens the file: no barrier before
    it (one per epoch would be a cost and a collective for nothing)."""
    return isinstance(call.func, cst.Attribute) and call.func.attr.value in _STORING_METHODS


def _barrier_before_reading_written_paths(facts: Facts, edits: Edits, setup: Plan,
                                         waiting: set[Statement]) -> None:
    """Rule: a file that rank 0 alone writes (`json.dump(results, open(path, "w"))`, `with
    open(path, "w")`, `torch.save(obj, path)`, put on rank 0 by side_effects.py) and that
    the same function then hands, by the same path expression, to a call on every rank
    (`coco.loadRes(path)`, `score(path)`): the other ranks would read it before rank 0 has
    written it, or last epoch's copy. A barrier goes before the reading statement (DDP309),
    as before a torch.load of a saved checkpoint. Not again where that rule waits already,
    nor before a call of a function that loads (it waits inside)."""
    write_calls = [call for call in _opens(facts) if opens_for_writing(call)] + list(facts.save_calls) + [
        call for qualified in sorted(_PATH_OF_WRITER) for call in facts.calls_named.get(qualified, ())]
    # (Calls of a function that loads, or that already waits before its own read: the
    # barrier is inside it.)
    readers = {facts.function_of(node) for node in [*facts.load_calls, *waiting]} - {None}
    loads = set(facts.load_calls) | set(facts.helper_load_calls) | {
        call for reader in readers if reader is not None for call in facts.calls_of(reader)}
    not_reads = {call for qualified in _NOT_READS for call in facts.calls_named.get(qualified, ())}
    loggers = logger_names(facts)
    not_reads |= {call for calls in facts.calls_by_callee.values() for call in calls
                  if _only_tells(facts, call, loggers) or _only_stores(call)}
    done = waiting  # (shared: a barrier placed here serves a delete after it, DDP324)
    # (A function that downloads runs its files on local rank 0 while the others wait at
    # downloads.py's barrier: another barrier there would pair with that one.)
    downloading = {facts.function_of(statement) for statement in facts.download_statements}
    for write in write_calls:
        function = facts.function_of(write)
        if not _on_rank0_only(facts, setup, write) or function in downloading:
            continue
        path = _path_written(facts, write)
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
                waited = _wait_before(facts, edits, setup, statement, [write], waited_at=done)
                done.add(statement)
                if waited is not None:
                    done.add(waited)


def _barrier_before_deleting_what_ranks_read(facts: Facts, edits: Edits, setup: Plan, waiting: set[Statement]) -> None:
    """Rule: a delete only rank 0 makes (`shutil.rmtree(scratch)`, `os.remove(path)`) of a
    file or folder that every rank reads before it (`torch.load(os.path.join(scratch,
    "best.pt"))`, `torch.load(path)`: the path's expression, or a name it is built from, in
    the read's arguments) waits until every rank has read (DDP324): rank 0 would delete it
    while another rank still loads from it, on a file system they share. The barrier goes
    before the outermost statement that only rank 0 runs (never inside its guard), or before
    the outermost test of the file around it (`if os.path.exists(scratch):`), and not where a
    barrier placed after the read waits already. A folder in a machine's own temporary folder
    is machine_local.py's (DDP322)."""
    deletes = [(call, call.args[0].value) for qualified in sorted(REMOVALS) for call in facts.calls_named.get(
        qualified, ()) if call.args] + _path_method_deletes(facts)
    deletes = [(call, path) for call, path in deletes
               if _on_rank0_only(facts, setup, call) and call not in facts.guarded_in_helper]
    if not deletes:
        return
    local = machine_local_names(facts, [])
    reads = [call for call in [*facts.load_calls, *facts.helper_load_calls, *_pretrained_folder_reads(facts),
                               *_opens(facts), *_data_reads(facts)]
             if not (call in _opens(facts) and _open_mode(call) & _WRITING_MODES)
             and not _read_by_rank0_alone(facts, setup, call)]
    for delete, path in deletes:
        deleted = edits.code(path)
        if set(names_in(path)) & local:
            continue
        deleted_shape = path_shape(facts.parents, facts.assigned_values, path)
        read = [call for call in reads if (_names_path(edits, call, deleted) or _shapes_meet(
            facts, call, deleted_shape) and not _read_in_an_earlier_training_pass(facts, call, delete, path))
            and _saved_before(facts, call, delete)]
        if not read:
            continue
        statement = _outermost_rank0_statement(facts, setup, delete)
        if any(_comes_after(facts, place, statement) and all(
                facts.line_of(call) < facts.line_of(place) for call in read) for place in waiting):
            continue
        waited = _wait_before(facts, edits, setup, statement, [], waited_at=waiting, code="DDP324")
        if waited is not None:
            waiting.add(waited)


def _names_path(edits: Edits, read: cst.Call, deleted: str) -> bool:
    """The read's arguments name the deleted path, or a folder it is in: the same expression,
    or one inside them (`os.path.join(scratch, "best.pt")`, `f"{run_dir}/last.pt"`)."""
    return any(edits.code(node) == deleted for arg in read.args for kind in _PATH_PARTS
               for node in find_all(arg.value, kind))


def _shapes_meet(facts: Facts, read: cst.Call, deleted: Optional[str]) -> bool:
    """Rule: the read names the deleted file or a file in the deleted folder by another
    spelling: a name bound once to the path (`best = os.path.join("ckpt", "epoch3.pt")`, then
    `shutil.rmtree("ckpt")`), a loop over what a glob lists (`for stale in
    glob.glob("ckpt/epoch*.pt"): os.remove(stale)` after `torch.load(f"ckpt/epoch{e}.pt")`)."""
    return deleted is not None and any(
        (shape := path_shape(facts.parents, facts.assigned_values, arg.value)) is not None
        and may_be_within(shape, deleted) for arg in read.args if not arg.star)


def _path_method_deletes(facts: Facts) -> list[tuple[cst.Call, cst.BaseExpression]]:
    """pathlib's deletes, `stale.unlink()`, `(run_dir / "best.pt").unlink(missing_ok=True)`,
    `work.rmdir()`, with the path they delete, where the receiver is built from a string or a
    glob (`work = Path("ckpts")`, `for stale in work.glob("*.pt")`): a method of that name on
    anything else is not taken for a delete."""
    return [(call, call.func.value) for callee, calls in facts.calls_by_callee.items()
            if callee.rpartition(".")[2] in ("unlink", "rmdir") for call in calls
            if isinstance(call.func, cst.Attribute) and has_a_written_part(
                path_shape(facts.parents, facts.assigned_values, call.func.value))]


def _read_in_an_earlier_training_pass(facts: Facts, read: cst.Call, delete: cst.Call,
                                      path: cst.BaseExpression) -> bool:
    """Rule: `torch.load(f"ckpts/epoch{epoch}.pt")` then `os.remove(f"ckpts/epoch{epoch - 2}.pt")`
    in one epoch loop that trains: the file deleted is one every rank read passes ago, and the
    DDP steps of the passes between (each an all-reduce every rank joins) order that read before
    this delete. Keeping the last K checkpoints needs no barrier each epoch."""
    shared = _innermost_loop_with(facts, read, [delete])
    if not isinstance(shared, cst.For) or not facts.loop_trains(shared):
        return False
    read_fields = [field for arg in read.args if not arg.star
                   for field in path_fields(facts.parents, facts.assigned_values, arg.value)]
    deleted_fields = path_fields(facts.parents, facts.assigned_values, path)
    return bool(read_fields) and bool(deleted_fields) and read_fields != deleted_fields


_PATH_PARTS: tuple[type[cst.BaseExpression], ...] = (cst.Name, cst.Attribute, cst.SimpleString, cst.Call)


def _outermost_rank0_statement(facts: Facts, setup: Plan, node: cst.CSTNode) -> Statement:
    """The outermost statement around node that only rank 0 runs (its guard goes around it)."""
    statement: Statement = facts.statement_of(node)
    for ancestor in ancestors_up_to(facts.parents, node, facts.function_of(node)):
        if ancestor in setup.rank0_statements and isinstance(ancestor, (cst.SimpleStatementLine,
                                                                        cst.BaseCompoundStatement)):
            statement = ancestor
    return statement


# Writers of a file named by one of their arguments (keyword, position), beside open() and
# torch.save: the image and array files a training loop writes on rank 0 (`save_image(fake,
# "samples.png")`) that the same function may read back on every rank (`Image.open(...)` for
# the run's logger).
_PATH_OF_WRITER = {
    "torchvision.utils.save_image": ("fp", 1), "numpy.save": ("file", 0), "numpy.savez": ("file", 0),
    "numpy.savez_compressed": ("file", 0), "numpy.savetxt": ("fname", 0), "joblib.dump": ("filename", 1),
    "imageio.imwrite": ("uri", 0), "imageio.v2.imwrite": ("uri", 0), "imageio.v3.imwrite": ("uri", 0),
    "cv2.imwrite": ("filename", 0), "skimage.io.imsave": ("fname", 0),
}


def _path_written(facts: Facts, write: cst.Call) -> Optional[cst.BaseExpression]:
    """The file a write names: open's first argument, torch.save's second, a data writer's
    own (json.dump and the like write to an open() of their own)."""
    if write in facts.save_calls:
        return argument_for(write, "f", 1)
    writer = next((_PATH_OF_WRITER[qualified] for qualified in _PATH_OF_WRITER
                   if write in facts.calls_named.get(qualified, ())), None)
    return argument_for(write, *writer) if writer is not None else argument_for(write, "file", 0)


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
    """torch.save calls, files opened for writing, data files written by numpy, pandas and
    the like (_data_writes), calls of the project's helpers that write files (only that, or
    among training: `fit(model, ...)` saving the best model) and shell commands that write
    files (analysis/shell.py)."""
    return facts.save_calls + [call for call in _opens(facts) if _open_mode(call) & _WRITING_MODES] + [
        call for call, effect in facts.helper_effects.items() if effect == effects.WRITES] + [
        call for call in shell.writing_commands(facts.calls_named)
        if not shell.after_a_download(facts.statement_of(call), facts.parents, facts.download_statements)
    ] + facts.helper_write_calls + _data_writes(facts) + _calls_of_method(facts, "save_pretrained") + image_saves(
        facts) + _method_calls(facts, _PATH_WRITING)


def _calls_of_method(facts: Facts, method: str) -> list[cst.Call]:
    """Every call of a method of that name, whatever it is called on."""
    return [call for callee, calls in facts.calls_by_callee.items()
            if callee.rpartition(".")[2] == method for call in calls]


def _pretrained_folder_reads(facts: Facts) -> list[cst.Call]:
    """Rule: `Model.from_pretrained(args.model_dir)` reads the folder that rank 0's
    `model.save_pretrained(args.model_dir)` writes (Hugging Face's folder of config and
    weights), as torch.load reads a checkpoint: every rank that reloads after the save waits
    for rank 0 to finish writing (DDP309). A literal (`"bert-base-uncased"`) names a hub
    model, not a folder this script writes. Only in a script that saves that way."""
    if not _calls_of_method(facts, "save_pretrained"):
        return []
    return [call for call in _calls_of_method(facts, "from_pretrained") if call.args
            and call.args[0].keyword is None and not call.args[0].star
            and not isinstance(call.args[0].value, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString))]


# Rule: data made once and read by every rank is a file rank 0 writes that the others read,
# as a checkpoint is: `if not os.path.exists(csv): make_csv()` writing with `df.to_csv(csv)`,
# then `pd.read_csv(csv)` in a dataset; arrays cached with `np.savez` and `np.load`ed back; a
# folder of samples `np.save`d one by one, then listed (`os.listdir`, `glob.glob`) and loaded
# per item. The writers: numpy's, joblib's and the imaging libraries' (image files), and a
# DataFrame's `to_*` methods; the readers: their counterparts and the folder listings.
_DATA_WRITERS = frozenset({
    "numpy.save", "numpy.savez", "numpy.savez_compressed", "numpy.savetxt", "joblib.dump",
    "imageio.imwrite", "imageio.v2.imwrite", "imageio.v3.imwrite", "cv2.imwrite", "skimage.io.imsave",
})
_DATA_WRITING_METHODS = frozenset({"to_csv", "to_json", "to_parquet", "to_pickle", "to_feather"})
_DATA_READERS = frozenset({
    "pandas.read_csv", "pandas.read_table", "pandas.read_json", "pandas.read_parquet", "pandas.read_pickle",
    "pandas.read_feather", "numpy.load", "numpy.loadtxt", "numpy.genfromtxt", "numpy.fromfile", "joblib.load",
    "glob.glob", "glob.iglob", "os.listdir", "os.scandir", "PIL.Image.open", "cv2.imread", "imageio.imread",
    "imageio.v2.imread", "imageio.v3.imread", "skimage.io.imread",
})


# Rule: pathlib's spellings of the same writes and reads, on a path of any name: files written
# with `(folder / name).write_text(...)` and a folder listed with `folder.glob("*.txt")` or
# read per item with `path.read_text()`. (Pillow's `image.save(path)` is side_effects.py's
# image_saves.)
_PATH_WRITING = frozenset({"write_text", "write_bytes"})
_PATH_READING = frozenset({"read_text", "read_bytes", "glob", "rglob", "iterdir"})


def _data_writes(facts: Facts) -> list[cst.Call]:
    found = [call for qualified in sorted(_DATA_WRITERS) for call in facts.calls_named.get(qualified, ())]
    return found + [call for call in facts.nodes_of(cst.Call)  # (`pd.DataFrame(rows).to_csv(path)` too)
                    if isinstance(call.func, cst.Attribute) and call.func.attr.value in _DATA_WRITING_METHODS]


def _data_reads(facts: Facts) -> list[cst.Call]:
    named = [call for qualified in sorted(_DATA_READERS) for call in facts.calls_named.get(qualified, ())]
    return list(dict.fromkeys(named + _method_calls(facts, _PATH_READING)))


def _method_calls(facts: Facts, methods: frozenset[str]) -> list[cst.Call]:
    """Calls of these methods on anything, a path put together on the spot too
    (`(folder / name).write_text(text)`, `self.paths[i].read_text()`)."""
    return [call for call in facts.nodes_of(cst.Call)
            if isinstance(call.func, cst.Attribute) and call.func.attr.value in methods]


_WRITING_MODES = frozenset("wax+")
# Methods that run per sample or per batch (a dataset's __getitem__, in the loader's
# workers too): a barrier there would run a different number of times on each rank.
_PER_ITEM_METHODS = frozenset({"__getitem__", "__getitems__", "__iter__", "__next__", "__len__", "__call__"})


def _opens(facts: Facts) -> list[cst.Call]:
    # (sorted: the order of a set of strings changes from run to run, the output must not)
    return [call for qualified in sorted(names.OPEN) for call in facts.calls_named.get(qualified, ())]


def _open_mode(call: cst.Call) -> frozenset[str]:
    """The letters of `open(path, mode)`'s literal mode ("r" when there is none); the
    writing letters when the mode is not written out, so that nothing unknown counts as a
    read."""
    mode = argument_for(call, "mode", 1)
    if mode is None:
        return frozenset("r")
    text = string_value(mode)
    return _WRITING_MODES if text is None else frozenset(text)


def _read_by_rank0_alone(facts: Facts, setup: Plan, call: cst.Call) -> bool:
    """The read runs on rank 0 alone, which wrote the file itself: in a statement rank 0 alone
    runs, or in a function that only such statements call (`print(stored_keys())`, whose
    body loads the checkpoint). A barrier there would wait for ranks that never come. (A
    function that every rank calls too keeps it: `build_model(arch)` saved on rank 0, then
    `build_model(arch, pretrained=path)` on every rank, which alone reaches the load.)"""
    if _on_rank0_only(facts, setup, call):
        return True
    callers = _calls_of(facts, facts.function_of(call))
    return bool(callers) and all(_on_rank0_only(facts, setup, caller) for caller in callers)


def _reads_once(facts: Facts, setup: Plan, call: cst.Call) -> bool:
    """`open(path)` for reading whose wait every rank reaches the same number of times: not
    on rank 0 alone, not in a method that runs per item or per batch, in a function (or a
    class's __init__) called from outside any loop and never from a statement rank 0 alone
    runs (`print(read_vocab())`: a barrier there would wait forever). A read in a loop of its
    function (`for name in names: rows.append(np.load(name))`, eager loading in a dataset's
    __init__) waits once, before the outermost such loop (_loop_around_read)."""
    writes = _open_mode(call) & _WRITING_MODES if call in _opens(facts) else False
    if writes or _read_by_rank0_alone(facts, setup, call):
        return False
    function = facts.function_of(call)
    if function is None:
        return True
    if function.name.value in _PER_ITEM_METHODS:
        return False
    callers = _calls_of(facts, function)
    return bool(callers) and not any(_in_loop(facts, caller) or facts.function_of(caller) is function
                                     for caller in callers)


def _calls_in_loops_of_reading_functions(facts: Facts, setup: Plan) -> dict[cst.Call, None]:
    """Rule: `stats = read_stats()` at each epoch's start, whose body opens (or np.loads) a
    file for reading: the call, on every rank once per pass, reads as the open does, and waits
    where a read in its place would (before the loop for a file written before it, in the loop
    for one rank 0 writes later in the pass, DDP323). Only functions of this file called by
    name, from a statement every rank runs, not per item or per batch, nor from themselves."""
    found: dict[cst.Call, None] = {}
    for read in [*_opens(facts), *_data_reads(facts)]:
        function = facts.function_of(read)
        writes = read in _opens(facts) and bool(_open_mode(read) & _WRITING_MODES)
        if function is None or function.name.value in _PER_ITEM_METHODS or writes \
                or _read_by_rank0_alone(facts, setup, read):
            continue
        callers = _calls_of(facts, function)
        if any(_in_loop(facts, caller) for caller in callers) and not any(
                facts.function_of(caller) is function or facts.class_of(function) is not None for caller in callers):
            found.update((caller, None) for caller in callers if not _on_rank0_only(facts, setup, caller))
    return found


def _datasets_reading_later(facts: Facts, setup: Plan) -> list[cst.Call]:
    """Rule: a dataset class that opens a file for reading (or loads one, _DATA_READERS) in a method that runs per item
    or per pass (`__getitem__` opening its file lazily, an IterableDataset's `__iter__`)
    reads it when its loader is iterated, in the loader's workers too, where no barrier can
    go. Every such read comes after the dataset is made (`LineDataset(path)`), so the
    barrier goes before the statement that makes it, where it runs once per rank (not in a
    loop, not on rank 0 alone, in a function called from outside any loop), when rank 0
    alone wrote a file before that statement. The calls that make such a dataset."""
    classes: set[str] = set()
    reads = [call for call in _opens(facts) if not _open_mode(call) & _WRITING_MODES] + _data_reads(facts)
    for call in reads:
        function = facts.function_of(call)
        owner = facts.class_of(function)
        if function is not None and owner is not None and function.name.value in _PER_ITEM_METHODS:
            classes.add(owner.name.value)
    made: list[cst.Call] = []
    for name in sorted(classes):
        for call in facts.calls_by_callee.get(name, ()):
            function = facts.function_of(call)
            if _in_loop(facts, call) or _read_by_rank0_alone(facts, setup, call):
                continue
            callers = _calls_of(facts, function)
            if function is None or callers and not any(_in_loop(facts, caller) for caller in callers):
                made.append(call)
    return made


def _written_on_a_later_pass(facts: Facts, read: cst.Call, write: cst.Call) -> bool:
    """A loop holds the read and the write (a later statement of its body writes what an
    earlier one reads on the next pass): in the read's function, or around a call of this
    file from which the read's function runs (`if epoch: score("latest.pt")` at an epoch's
    start, the save every few steps in the same epoch loop)."""
    if _innermost_loop_with(facts, read, [write]) is not None:
        return True
    function = facts.function_of(read)
    return function is not None and any(
        _innermost_loop_with(facts, call, [write]) is not None for call in _calls_reaching(facts, function))


def _may_name_the_same_file(facts: Facts, write: cst.Call, read: cst.Call) -> bool:
    """Rule: the write's path and the read's may be one file: the same expression, a name in
    common (`best_path`, `os.path.join(out, "best.pt")` and `out`), or one of them unknown (a
    call of the file's function that writes, a path its parameter holds). Two literals that
    differ, or expressions of different names (`output_dir / f"model_{step}.pth"` and a book's
    `file_path`), are not."""
    written = _path_written(facts, write) if write in facts.save_calls or write in _opens(facts) or any(
        write in facts.calls_named.get(qualified, ()) for qualified in _PATH_OF_WRITER) else None
    path = _path_read(facts, read)
    if written is None or path is None:
        return True
    if any(_is_parameter(facts, node) for node in (written, path)):
        return True
    if isinstance(written, cst.SimpleString) and isinstance(path, cst.SimpleString):
        return written.evaluated_value == path.evaluated_value
    return bool(names_in(written) & names_in(path)) or facts.module.code_for_node(written) == \
        facts.module.code_for_node(path)


def _path_read(facts: Facts, read: cst.Call) -> Optional[cst.BaseExpression]:
    """The path a read names (its first argument); for a call of the file's function that
    reads (`read_stats()`, `read_text_file(file_path)`), the argument its read's parameter
    is handed, or None when that is not known."""
    function = facts.functions.get(dotted_name(read.func) or "")
    if function is None:
        return argument_for(read, "f", 0)
    inner = [call for call in [*_opens(facts), *_data_reads(facts)] if facts.function_of(call) is function]
    paths = {dotted_name(path) for call in inner if (path := argument_for(call, "file", 0)) is not None}
    if len(paths) != 1 or None in paths:
        return None
    parameter = paths.pop()
    return handed_for(read, function, parameter) if parameter in positional_parameters(function) else None


def _is_parameter(facts: Facts, path: cst.BaseExpression) -> bool:
    function = facts.function_of(path)
    return isinstance(path, cst.Name) and function is not None and path.value in positional_parameters(function)


def _innermost_loop_with(facts: Facts, read: cst.Call, writes: list[cst.Call]) -> Optional[Statement]:
    """The innermost for or while loop of the read's function that holds the read and one of
    the writes: the write itself, or a call of this file from which the write's function runs
    (`save_teacher(model)` at an epoch's end, whose body saves)."""
    function = facts.function_of(read)
    reaching = [node for write in writes for node in _write_and_calls_reaching(facts, write)]
    for ancestor in ancestors_up_to(facts.parents, read, function):
        if isinstance(ancestor, (cst.For, cst.While)) and any(
                facts.ancestor_in(node, ancestor.body) is not None for node in reaching):
            return ancestor
    return None


def _write_and_calls_reaching(facts: Facts, write: cst.Call) -> list[cst.Call]:
    """The write, and the calls of this file from which its function runs."""
    owner = facts.function_of(write)
    return [write] + (_calls_reaching(facts, owner) if owner is not None else [])


def _waited_for_in_this_pass(facts: Facts, placed: list[Statement], writes: list[cst.Call],
                             statement: Statement) -> bool:
    """Rule: one barrier per pass serves every later read of that pass. A barrier already
    placed earlier in the same run of the statements around this read (before a statement
    of the read's block or of a block around it, `_comes_after`), with none of the read's
    writes between them (nor a call from which one runs), has made every rank wait for them
    already: the statistics file and the class weights read one after the other at an
    epoch's start wait once."""
    function = facts.function_of(statement)
    lines = [facts.line_of(node) for write in writes for node in _write_and_calls_reaching(facts, write)
             if facts.function_of(node) is function]
    return any(place is not statement and _comes_after(facts, place, statement) and not any(
        facts.line_of(place) <= line <= facts.line_of(statement) for line in lines) for place in placed)


def _loop_around_read(facts: Facts, call: cst.Call, within: Optional[cst.CSTNode] = None) -> Optional[Statement]:
    """Rule: the outermost for or while loop of its function whose body holds the read: the
    loop statement runs once per rank where the function runs once, so a barrier before it
    is reached alike on every rank, however many times each rank goes round (a barrier in
    the body would be a collective per file, and a hang where the ranks list different
    numbers of files). It serves only writes that are done before the loop: for a file rank 0
    writes in a loop around the read too (each epoch's checkpoint read back in that epoch),
    `within` is that loop, where the search stops. None when no loop holds it (a
    comprehension's statement runs once)."""
    outermost: Optional[Statement] = None
    child: cst.CSTNode = call
    parent = facts.parents.get(call)
    while parent is not None and parent is not within and not isinstance(parent, (cst.FunctionDef, cst.Lambda)):
        if isinstance(parent, (cst.For, cst.While)) and child in (parent.body, parent.orelse):
            outermost = parent
        child, parent = parent, facts.parents.get(parent)
    return outermost


def _in_loop(facts: Facts, node: cst.CSTNode) -> bool:
    """In the body of a for or while loop of its function (or of the module)."""
    child: cst.CSTNode = node
    parent = facts.parents.get(node)
    while parent is not None and not isinstance(parent, (cst.FunctionDef, cst.Lambda)):
        if isinstance(parent, (cst.For, cst.While)) and child in (parent.body, parent.orelse):
            return True
        if isinstance(parent, cst.CompFor):
            return True
        child, parent = parent, facts.parents.get(parent)
    return False


def _calls_of(facts: Facts, function: Optional[cst.FunctionDef]) -> list[cst.Call]:
    """The calls of a function of this file; for a class's __init__, the class's own calls
    (`CSVData(path)`) as well."""
    if function is None:
        return []
    calls = list(facts.calls_of(function))  # `Trainer(model, loader).fit(epochs)` too
    owner = facts.class_of(function)
    if owner is not None and function.name.value == "__init__" \
            and facts.class_inits.get(owner.name.value) is function:
        calls.extend(facts.calls_by_callee.get(owner.name.value, ()))
    return calls


def _on_rank0_only(facts: Facts, setup: Plan, node: cst.CSTNode) -> bool:
    if node in facts.guarded_in_helper:
        return True  # a helper whose module, migrated in this run, writes on rank 0 alone
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
            for call in _calls_of(facts, load_function)):
        return True
    if save_function is None:
        return False
    # (Also through calls in between: `trainer.fit()` whose method calls `self.save(path)`.)
    saving_calls = _calls_reaching(facts, save_function)
    if any(facts.function_of(call) is load_function and facts.line_of(call) < facts.line_of(load)
           for call in saving_calls):
        return True
    # `train(resume=False)` then `train(resume=True)`, `train()` then `resume()`, or
    # `save_checkpoint(...)` in the epoch loop then `load_checkpoint(path)` after it: a call
    # that saves runs before a call that loads, in the loading call's block or in a statement
    # of it that comes first (not the two branches of `if args.subcommand == "train": ...
    # else: ...`).
    return any(_runs_before(facts, saving, loading)
               for saving in saving_calls for loading in _calls_of(facts, load_function))


def _calls_reaching(facts: Facts, function: cst.FunctionDef) -> list[cst.Call]:
    """The calls of this file from which `function` runs: its own calls, and the calls of the
    functions and methods those sit in, a few levels up (`trainer.fit(4)` in main, whose
    method calls `self.run(epochs)`, which calls `self.save(path)`)."""
    found: list[cst.Call] = []
    pending, seen = [function], {function}
    for _ in range(4):
        callers: list[cst.FunctionDef] = []
        for current in pending:
            for call in _calls_of(facts, current):
                found.append(call)
                caller = facts.function_of(call)
                if caller is not None and caller not in seen:
                    seen.add(caller)
                    callers.append(caller)
        pending = callers
    return found


def _runs_before(facts: Facts, first: cst.Call, then: cst.Call) -> bool:
    """`first` sits in a statement that comes before the one holding `then`, in `then`'s block
    or in a block around it within their function: the path to `then` has passed `first`, or
    passed by it where `first` sits under a test of its own (`if mode in {"train", "full"}:
    model = train(loader)`, then `if mode in {"test", "full"}: load(model)`: in "full" mode
    the save has run). Two branches of one if (`if mode == "train": ... else: load(...)`) are
    not: the statement around both is that if itself."""
    if facts.line_of(first) >= facts.line_of(then):
        return False
    loading: Statement = facts.statement_of(then)
    while True:
        block = facts.block_of(loading)
        earlier = facts.ancestor_in(first, block)
        if earlier is not None:
            return earlier is not loading
        around = facts.parents.get(block)
        if around is None or isinstance(around, (cst.FunctionDef, cst.ClassDef)) \
                or facts.function_of(first) is not facts.function_of(then):
            return False
        loading = facts.statement_of(around)


_CHECKPOINT = TRAINING + 'torch.save(model.state_dict(), "model.pt")\n'
_PRETRAINED = TRAINING.replace("import torch\n", "import torch\nfrom transformers import BertModel\n", 1) + (
    'out_dir = "best"\nmodel.save_pretrained(out_dir)\n')
_NOTES = TRAINING + 'with open("notes.txt", "w") as f:\n    f.write("trained")\n'
_FETCHED_OR_READ = TRAINING + ('import os\nif not os.path.exists("notes.txt"):\n    with open("notes.txt", "w") as f:\n'
                               '        f.write("trained")\nelse:\n    notes = open("notes.txt").read()\n')

_READ_BACK = ('import numpy as np\n\n\ndef read_back():\n    return np.load("w.npy")\n\n\n'
              'np.save("w.npy", np.ones(2))\nfirst = np.load("w.npy")\nsecond = read_back()\n')

CASES = (
    Emits(TRAINING.replace("optimizer = torch", 'model.load_state_dict(torch.load("model.pt"))\noptimizer = torch'),
          "DDP303", ("map_location=",)),
    # A script that stays on the CPU (it never names a device, and makes a tensor in the loop
    # without one): the setup names none either, so the CPU.
    Emits(TRAINING.replace('device = torch.device("cuda" if torch.cuda.is_available() else "cpu")\n', "")
          .replace(".to(device)", "")
          .replace("        loss = torch", "        shift = torch.zeros(1)\n        loss = torch")
          .replace("optimizer = torch", 'model.load_state_dict(torch.load("model.pt"))\noptimizer = torch'),
          "DDP303", ('torch.load("model.pt", map_location="cpu")',)),
    # Outside the setup's scope: an unpickled optimizer object keeps its state where it is
    # mapped, so its GPU tensors come to this rank's GPU; a state dict goes to the CPU, and
    # load_state_dict moves it next to the parameters.
    Emits(TRAINING + 'def restore(path):\n    state = torch.load(path, weights_only=False)\n'
          '    opt = state["optimizer"]\n    opt.zero_grad()\n    return opt\n',
          "DDP303", ("map_location=on_this_process_device",)),
    Emits(TRAINING + 'def restore(path):\n    state = torch.load(path)\n'
          '    optimizer.load_state_dict(state["optimizer"])\n',
          "DDP303", ('torch.load(path, map_location="cpu")',)),
    Emits(_CHECKPOINT + 'model.load_state_dict(torch.load("model.pt"))\n', "DDP309", ("dist.barrier()",)),
    Silent(_CHECKPOINT, "DDP309"),
    # A folder save_pretrained wrote, reloaded by from_pretrained on every rank; a literal
    # names a hub model, which no rank writes.
    Emits(_PRETRAINED + 'reloaded = BertModel.from_pretrained(out_dir)\n', "DDP309", ("dist.barrier()",)),
    Silent(_PRETRAINED + 'reloaded = BertModel.from_pretrained("bert-base-uncased")\n', "DDP309"),
    # Saved through calls of this file's methods (made in place, one calling the next).
    Emits(TRAINING + 'class Saver:\n    def __init__(self, net):\n        self.net = net\n\n    def run(self):\n'
          '        self.store()\n\n    def store(self):\n        torch.save(self.net.state_dict(), "model.pt")\n\n\n'
          'Saver(model).run()\nmodel.load_state_dict(torch.load("model.pt"))\n', "DDP309", ("dist.barrier()",)),
    # A file rank 0 wrote, opened for reading by every rank once; not in a loop, nor where
    # rank 0 alone reads it.
    Emits(_NOTES + 'notes = open("notes.txt").read()\n', "DDP309", ("dist.barrier()",)),
    # Read in a loop: one barrier, before the loop (not one per pass)...
    Emits(_NOTES + 'for name in ["notes.txt"]:\n    notes = open(name).read()\n', "DDP309",
          ('    dist.barrier()  # rank 0 has finished writing what is read next\nfor name in ["notes.txt"]:',)),
    # ...but not before a loop that writes the file again: there the wait stays before the
    # read, in the loop (_barrier_before_reading_written_paths).
    Emits(TRAINING.replace("    for x, y in loader:", '    with open("notes.txt", "w") as f:\n'
                           '        f.write("trained")\n    notes = open("notes.txt").read()\n    for x, y in loader:'),
          "DDP309", ('        dist.barrier()  # rank 0 has finished writing what is read next\n'
                     '    notes = open("notes.txt").read()',)),
    # Read per item: the barrier goes before the dataset is made, not into __getitem__.
    Emits(_NOTES + 'class Lines(torch.utils.data.Dataset):\n    def __getitem__(self, i):\n'
          '        return open("notes.txt").read()\n\n\nlines = Lines()\n', "DDP309",
          ("    dist.barrier()  # rank 0 has finished writing what is read next\nlines = Lines()",)),
    Silent(_NOTES + 'print(open("notes.txt").read())\n', "DDP309"),
    Silent(_NOTES + 'def read_notes():\n    return open("notes.txt").read()\n\n\nprint(read_notes())\n', "DDP309"),
    Silent(_CHECKPOINT + 'def stored_keys():\n    return list(torch.load("model.pt"))\n\n\nprint(stored_keys())\n',
           "DDP309"),
    # Under a test of the file: the barrier waits before the test, where every rank passes...
    Emits(_NOTES + 'import os\nif os.path.exists("notes.txt"):\n    notes = open("notes.txt").read()\n', "DDP309",
          ('    dist.barrier()  # rank 0 has finished writing what is read next\nif os.path.exists("notes.txt"):',)),
    # ...unless the write is inside the test too: then nothing is certain, and it is reported.
    Emits(_FETCHED_OR_READ, "DDP314"),
    Silent(_FETCHED_OR_READ, "DDP309"),
    # Data made once by numpy or pandas on rank 0, then read by every rank (_DATA_WRITERS).
    Emits('import numpy as np\nnp.savez("cache.npz", x=np.ones(4))\n' + TRAINING + 'cached = np.load("cache.npz")\n',
          "DDP309", ("dist.barrier()",)),
    Emits('import pandas as pd\npd.DataFrame({"a": [1]}).to_csv("t.csv")\n' + TRAINING
          + 'table = pd.read_csv("t.csv")\n', "DDP309", ("dist.barrier()",)),
    Emits(TRAINING + 'import glob\nimport numpy as np\nnp.save("out/w.npy", np.ones(2))\n'
          'files = glob.glob("out/*.npy")\n', "DDP309", ("dist.barrier()",)),
    Silent(TRAINING + 'import numpy as np\nnp.save("losses.npy", np.ones(2))\n', "DDP309"),
    # One barrier serves a later read of what was written before it (read_back() runs after
    # it); written again after that barrier, the later read waits again.
    Emits(TRAINING + _READ_BACK, "DDP309", ('def read_back():\n    return np.load("w.npy")',)),
    Emits(TRAINING + _READ_BACK.replace("second = read_back()", 'np.save("w.npy", np.zeros(2))\nsecond = read_back()'),
          "DDP309", ('def read_back():\n    if distributed:\n        dist.barrier()',)),
    # Saved at an epoch's end, read at the next one's start: the wait is in the loop, once per
    # pass, one barrier for both reads (DDP323)...
    Emits(TRAINING.replace("import torch\n", "import numpy as np\nimport torch\n", 1).replace(
        "    for x, y in loader:", '    if epoch:\n        w = np.load("w.npy")\n        b = np.load("b.npy")\n'
        '    for x, y in loader:') + '    np.save("w.npy", np.ones(2))\n    np.save("b.npy", np.ones(2))\n',
        "DDP323", ('    if epoch:\n        if distributed:\n            dist.barrier()  # rank 0 has finished '
                   'writing what is read next\n        w = np.load("w.npy")\n        b = np.load("b.npy")',)),
    # Read by a function of the file called at each epoch's start: the wait goes before the call.
    Emits(TRAINING.replace("import torch\n", "import json\nimport torch\n", 1).replace(
        "for epoch in range(3):\n", 'def read_stats():\n    with open("s.json") as f:\n'
        '        return json.load(f)\n\n\nfor epoch in range(3):\n    stats = read_stats() if epoch else {}\n', 1)
        + '    with open("s.json", "w") as f:\n        json.dump({"epoch": epoch}, f)\n',
        "DDP323", ('        dist.barrier()  # rank 0 has finished writing what is read next\n'
                   '    stats = read_stats() if epoch else {}',)),
    # (Nor for a corpus read file by file in a loop that saves checkpoints under other names.)
    Silent(TRAINING.replace("for epoch in range(3):\n", 'def read_text(path):\n    return open(path).read()\n\n\n'
                            'for epoch in range(3):\n    for name in ["a.txt", "b.txt"]:\n'
                            '        text = read_text(name)\n', 1)
           + '    torch.save(model.state_dict(), f"ckpt_{epoch}.pt")\n', "DDP323"),
    # ...and none where rank 0 alone reads it back.
    Silent(TRAINING.replace("    for x, y in loader:", '    if epoch:\n        print(torch.load("m.pt"))\n'
                            '    for x, y in loader:') + '    torch.save(model.state_dict(), "m.pt")\n',
           "DDP323"),
    # Deleted by rank 0 after every rank read it (DDP324); not a file nobody reads.
    Emits(_CHECKPOINT + 'import os\nmodel.load_state_dict(torch.load("model.pt"))\nos.remove("model.pt")\n',
          "DDP324", ('    dist.barrier()  # every rank has read what rank 0 deletes next\n'
                     'if is_main:\n    os.remove("model.pt")',)),
    Silent(_CHECKPOINT + 'import os\nos.remove("model.pt")\n', "DDP324"),
    # (Read before anything is written: nothing to wait for.)
    Silent('import pandas as pd\ntable = pd.read_csv("t.csv")\n' + TRAINING
           + 'pd.DataFrame({"a": [1]}).to_csv("out.csv")\n', "DDP309"),
)
