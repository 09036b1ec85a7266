"""Folders named from the clock or a random draw, and temporary folders, chosen once by rank 0
(DDP310).

Every rank runs `run_dir = os.path.join("runs", datetime.now().strftime(...))` at its own
moment: rank 0 creates and writes its folder, and a rank that reads from the folder it named
(the best checkpoint, reloaded at the end) finds nothing there. The same holds for a
`TemporaryDirectory()` that holds a file rank 0 writes and every rank reads. Rank 0's value is
broadcast to the others right where it is made, and a temporary folder outlives every rank's
last read of it.
"""
from typing import Optional

import libcst as cst

from ddpify.analysis import names, seeding
from ddpify.analysis.control import Facts
from ddpify.analysis.effects import COUNTED_RUNS
from ddpify.analysis.facts import Statement
from ddpify.analysis.nodes import dotted_name, find_all, names_in
from ddpify.diagnostics import Rule, Severity
from ddpify.emit import collectives
from ddpify.emit.edits import Edits, Insertion
from ddpify.plan import Plan
from ddpify.rules import machine_local, report_only
from ddpify.rules.cases import TRAINING, Emits, Silent
from ddpify.rules.setup import group_joined_before, placed_above

RULES = (
    Rule("DDP310", Severity.EDIT, "folder named from the clock or a temporary folder chosen by rank 0",
         "Each rank would name its own folder (datetime.now(), uuid4(), mkdtemp(), "
         "TemporaryDirectory()): rank 0 writes into its folder and a rank that reads from the "
         "folder it named finds nothing there. Rank 0's name is broadcast to the others where "
         "it is made, and a temporary folder is left only when every rank is done with it. "
         "Across machines the folder must be on a file system every rank sees.",
         "Nothing to do on one machine; on several, keep run folders on shared storage."),
    Rule("DDP315", Severity.WARNING, "folder named from the clock in another module before the group is joined",
         "A function of another module of the project names a folder from the clock "
         "(`args.log_dir = os.path.join(args.log_dir, datetime.now().strftime(...))` inside "
         "`get_args()`), and this script calls it before the process group is joined: no rank "
         "can learn rank 0's name yet, so each rank names its own folder, and a file rank 0 "
         "writes there is missing from the folder another rank reads.",
         "Call that function after the process-group setup (ddpify then has rank 0 choose the "
         "name), or name the folder without the clock (a run name passed on the command line)."),
    Rule("DDP316", Severity.WARNING, "folder named from the clock in this script before the group is joined",
         "This script names a folder from the clock, a random draw or a count of the runs already "
         "there where the process group is not joined yet (at module level, or in the `__main__` "
         "block before the call that sets it up): rank 0 cannot share its name with the other "
         "ranks there, so each rank names its own folder, and a file rank 0 writes there is "
         "missing from the folder another rank reads.",
         "Name the folder after the process-group setup (in the function that sets it up; ddpify "
         "then has rank 0 choose the name and broadcast it), or pass the run's name on the "
         "command line."),
)

HELPER = '''\


def chosen_by_rank_0(value):
    """Rank 0's value on every rank: a folder named from the clock or a random draw is one
    folder for the whole job (on a file system all ranks see)."""
    return every_rank(value)[0] if dist.is_initialized() else value
'''
# Leaving the `with` deletes rank 0's folder: no rank may still be reading from it.
LEAVE_TOGETHER_CODE = """\
if dist.is_initialized():
    dist.barrier()  # local rank 0 deletes the folder when it leaves; the others have read it
"""


def plan(facts: Facts, edits: Edits, setup: Plan) -> None:
    _report_clock_named_before_setup(facts, edits, setup)
    path_names = _names_in_paths(facts)
    for statement, target, value in _assignments_from_clock_or_chance(facts):
        if target in path_names or _numbers_a_path(facts, target, value, path_names):
            if not setup.library and not group_joined_before(facts, setup, statement):
                # (Rule: a broadcast runs only where the group exists; before it, a no-op.)
                edits.report("DDP316", statement, _named_before_setup_message(edits, statement, target))
                continue
            # (mkdtemp() makes the folder on this machine's own disk: its local rank 0 names it there.)
            made_here = set(facts.calls_named.get("tempfile.mkdtemp", ()))
            on_this_machine = any(call in made_here for call in find_all(value, cst.Call))
            helper = "chosen_on_this_machine" if on_this_machine else "chosen_by_rank_0"
            edits.expressions[value] = _wrapped(edits, helper)
            _add_helper(edits, on_this_machine)
            edits.report("DDP310", statement)
    _share_named_temporary_files(facts, edits, path_names)
    for with_statement, target in _temporary_directories(facts):
        if target not in path_names or not isinstance(with_statement.body, cst.IndentedBlock):
            continue
        body = with_statement.body.body
        # (Its folder is on its machine's own disk: each machine's local rank 0 names it there.)
        first = edits.statement(f"{target} = chosen_on_this_machine({target})\n")
        edits.insert_before(body[0], Insertion([first]))
        edits.insert_after(body[-1], edits.statements(LEAVE_TOGETHER_CODE))
        _add_helper(edits, on_this_machine=True)
        edits.report("DDP310", with_statement)


def _share_named_temporary_files(facts: Facts, edits: Edits, path_names: set[str]) -> None:
    """Rule: `with NamedTemporaryFile() as f:` makes one file per rank; `path = f.name`, which a
    file call uses, becomes the name of this machine's local rank 0's file (the one it writes,
    machine_local.py), and that file is deleted only when every rank has left the `with`."""
    for call in facts.calls_named.get("tempfile.NamedTemporaryFile", ()):
        item = facts.parents.get(call)
        with_statement = facts.parents.get(item) if isinstance(item, cst.WithItem) else None
        if not isinstance(item, cst.WithItem) or not isinstance(with_statement, cst.With) or item.asname is None:
            continue
        handle = dotted_name(item.asname.name) if isinstance(item.asname.name, cst.BaseExpression) else None
        if handle is None or not isinstance(with_statement.body, cst.IndentedBlock):
            continue
        shared = False
        for statement in with_statement.body.body:
            assign = _single_assignment(statement) if isinstance(statement, cst.SimpleStatementLine) else None
            target = dotted_name(assign.targets[0].target) if assign is not None else None
            if assign is not None and target in path_names and dotted_name(assign.value) == f"{handle}.name":
                edits.expressions[assign.value] = _wrapped(edits, "chosen_on_this_machine")
                shared = True
        if shared:
            edits.insert_after(with_statement.body.body[-1], edits.statements(LEAVE_TOGETHER_CODE))
            _add_helper(edits, on_this_machine=True)
            edits.report("DDP310", with_statement)


def _report_clock_named_before_setup(facts: Facts, edits: Edits, setup: Plan) -> None:
    """Rule: a call of a function of another module of the project that names a folder from
    the clock (SimSiam: `args = get_args()`, whose `args.log_dir = os.path.join(...,
    datetime.now().strftime(...))`), made where the process group is not yet joined, leaves
    each rank its own folder: `chosen_by_rank_0` in that module cannot broadcast before the
    group exists. ddpify cannot move the call (what runs between may need its result), so it
    reports the call with the line in the other module (DDP315)."""
    if facts.library:
        return  # (a helper module: its callers' setup decides)
    for call in sorted(facts.clock_named_calls, key=facts.start_of):
        if group_joined_before(facts, setup, call) and not _above_setup(facts, edits, setup, call):
            continue
        qualified, line, source = facts.clock_named_calls[call]
        module, _, function = qualified.rpartition(".")
        drawn = _drawn_at_random(facts, call)
        if drawn is not None:
            handed, draw = drawn
            edits.report("DDP315", call, (
                f"`{edits.code(call.func)}()` is handed `{handed}`, named from a random draw "
                f"(`{edits.code(draw.func)}()`, line {facts.start_of(draw)[0]}) that no seed precedes, made on "
                "each rank before the process group is joined: each rank names its own folder (the clock "
                f"in {module}, line {line}, adds to it); seed the generator alike on every rank before the "
                "draw, or draw after the setup and broadcast rank 0's value"))
            continue
        if source == COUNTED_RUNS:
            # Rank 0 makes the run's folder while the others count: a late rank names the next run.
            edits.report("DDP315", call, f"`{edits.code(call.func)}()` numbers a run's folder by {source} "
                         f"({module}, line {line}) before the process group is joined here: a rank that "
                         f"counts after rank 0 made the folder names the next one; call `{function}()` after "
                         "the setup and broadcast rank 0's folder, or name the run on the command line")
            continue
        edits.report("DDP315", call, f"`{edits.code(call.func)}()` names a folder from the clock "
                     f"({module}, line {line}) before the process group is joined here: each rank "
                     f"names its own folder; call `{function}()` after the setup, or name the folder "
                     "without the clock")


def _named_before_setup_message(edits: Edits, statement: Statement, target: str) -> str:
    facts = edits.facts
    function = facts.function_of(statement)
    in_main_block = facts.main_guard is not None and facts.ancestor_in(statement, facts.main_guard) is not None
    where = (f"in `{function.name.value}()`" if function is not None
             else "in the `__main__` block" if in_main_block else "at module level")
    return (f"`{target}` names a folder from the clock or a count of earlier runs {where}, which runs before the "
            "process group is joined: each rank names its own folder; name it after the setup (rank 0's name is "
            "then broadcast), or pass the run's name on the command line")


def _drawn_at_random(facts: Facts, call: cst.Call) -> Optional[tuple[str, cst.Call]]:
    """Rule: the name the call is handed (`get_logger(logdir)`) is built, in this file and
    within two assignments, from a draw of the global `random` or `numpy.random` generator
    that no seed of it precedes (`run_id = random.randint(1, 100000)`, `logdir =
    os.path.join("runs", str(run_id))`): that draw is what differs per rank. The name and
    the draw; None otherwise."""
    seeds = seeding.seed_calls(facts, "random", "numpy")
    draws = {draw for qualified in report_only.GLOBAL_DRAWS for draw in facts.calls_named.get(qualified, ())}
    for argument in call.args:
        for handed in names_in(argument.value):
            seen, frontier = {handed}, [handed]
            for _ in range(3):
                values = [value for name in frontier for value in facts.assigned_values.get(name, ())]
                for value in values:
                    for inner in (value, *find_all(value, cst.Call)):
                        if not isinstance(inner, cst.Call):
                            continue
                        if inner in draws and not any(seeding.seeded_before(facts, seed, inner) for seed in seeds):
                            return handed, inner
                frontier = [name for value in values for name in names_in(value) if name not in seen]
                seen.update(frontier)
    return None


def _above_setup(facts: Facts, edits: Edits, setup: Plan, call: cst.Call) -> bool:
    """In the setup's own block, above the device choice the setup replaces or follows
    (`cfg = Config()` then `device = torch.device(...)`): run before the group is joined.
    Not when the setup goes above the call anyway, for output before it (`print(args)`, then
    `logger = Logger(args.logdir)`, then the device choice)."""
    anchor = setup.anchor
    if anchor is None or facts.function_of(call) is not setup.function:
        return False
    top = facts.ancestor_in(call, setup.block)
    if top is not None and placed_above(facts, edits, setup, top):
        return False
    if top is None or any(facts.start_of(early) <= facts.start_of(top) for early in setup.early_joins
                          if facts.block_of(early) is setup.block):
        return False  # (the group is joined early, above a loader sharded before the choice)
    return facts.start_of(top) < facts.start_of(anchor)


def _assignments_from_clock_or_chance(facts: Facts):
    """`name = <expression that calls datetime.now(), uuid4(), mkdtemp(), ...>`, and a run
    numbered by counting the runs already there (`f"runs/exp{len(os.listdir('runs'))}"`):
    a rank that counts after rank 0 made this run's folder names the next one."""
    counted = [call for qualified in sorted(names.FOLDER_LISTINGS) for call in facts.calls_named.get(qualified, ())
               if _counted(facts, call)]
    timed = [call for qualified in sorted(names.CLOCK_OR_CHANCE) for call in facts.calls_named.get(qualified, ())]
    for call in timed + counted:
        statement = facts.statement_of(call)
        assign = _single_assignment(statement)
        if assign is None:
            continue
        target = dotted_name(assign.targets[0].target)
        if target is not None:
            yield statement, target, assign.value


def _numbers_a_path(facts: Facts, target: str, value: cst.BaseExpression, path_names: set[str]) -> bool:
    """A count of the runs already there (`n = len(glob.glob(base + "*"))`) read by the value of
    a name that makes a path (`path = f"{base}{n + 1}"`, then `os.makedirs(path)`): rank 0's
    count is the run's number on every rank."""
    if not any(_counted(facts, call) for qualified in names.FOLDER_LISTINGS for call in find_all(value, cst.Call)
               if call in facts.calls_named.get(qualified, ())):
        return False
    return any(target in names_in(made) for name in path_names for made in facts.assigned_values.get(name, ()))


def _counted(facts: Facts, listing: cst.Call) -> bool:
    """`len(os.listdir(root))`, `len(glob.glob(pattern))`: how many entries a folder holds now."""
    argument = facts.parents.get(listing)
    counting = facts.parents.get(argument) if isinstance(argument, cst.Arg) else None
    return isinstance(counting, cst.Call) and isinstance(counting.func, cst.Name) and counting.func.value == "len"


def _single_assignment(statement: Statement) -> Optional[cst.Assign]:
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
        small = statement.body[0]
        if isinstance(small, cst.Assign) and len(small.targets) == 1:
            return small
    return None


def _temporary_directories(facts: Facts):
    """`with TemporaryDirectory() as tempdir:` (the with statement, the name)."""
    for call in facts.calls_named.get(names.TEMPORARY_DIRECTORY, ()):
        item = facts.parents.get(call)
        with_statement = facts.parents.get(item) if isinstance(item, cst.WithItem) else None
        if isinstance(item, cst.WithItem) and isinstance(with_statement, cst.With) and item.asname:
            target = dotted_name(item.asname.name) if isinstance(item.asname.name, cst.BaseExpression) else None
            if target is not None:
                yield with_statement, target


def _names_in_paths(facts: Facts) -> set[str]:
    """Names used in the arguments of calls that make, write or read files."""
    found: set[str] = set()
    for qualified in sorted(names.FILE_PATH_CALLS):
        for call in facts.calls_named.get(qualified, ()):
            for arg in call.args:
                found |= names_in(arg.value)
                found |= {name for name in _dotted_names_in(arg.value)}
    return found


def _dotted_names_in(node: cst.CSTNode) -> list[str]:
    return [name for name in map(dotted_name, find_all(node, cst.Attribute)) if name is not None]


def _wrapped(edits: Edits, helper: str):
    def rewrite(value: cst.BaseExpression) -> cst.BaseExpression:
        return cst.Call(func=cst.Name(helper), args=[cst.Arg(value=value)])

    return rewrite


def _add_helper(edits: Edits, on_this_machine: bool = False) -> None:
    collectives.use(edits)  # before the helper, which calls it
    if on_this_machine:
        machine_local.add_helper(edits)
    else:
        edits.add_helper("chosen_by_rank_0", HELPER, "dist")


_TRAINING_IMPORTS = "".join(TRAINING.splitlines(keepends=True)[:2])
_TRAINING_BODY_INDENTED = "".join("    " + line + "\n" if line else "\n" for line in TRAINING.splitlines()[3:])

CASES = (
    Emits("import os\nimport time\n"
          + TRAINING.replace("for epoch", 'run_dir = f"runs/{time.time()}"\nos.makedirs(run_dir)\nfor epoch')
          + 'torch.save(model.state_dict(), os.path.join(run_dir, "model.pt"))\n'
          + 'model.load_state_dict(torch.load(os.path.join(run_dir, "model.pt")))\n',
          "DDP310", ("run_dir = chosen_by_rank_0(",)),
    Silent(TRAINING, "DDP310"),
    # A run numbered by counting the runs there: rank 0's count, the run's number on every rank.
    Emits("import glob\nimport os\n" + TRAINING.replace(
        "for epoch", 'n = len(glob.glob("runs/exp*"))\nrun_dir = f"runs/exp{n + 1}"\nos.makedirs(run_dir)\nfor epoch')
          + 'torch.save(model.state_dict(), os.path.join(run_dir, "model.pt"))\n',
          "DDP310", ('n = chosen_by_rank_0(len(glob.glob("runs/exp*")))',)),
    # Named at module level while the setup goes into main(): no group to share the name yet.
    Emits("import os\nimport time\n" + _TRAINING_IMPORTS + 'RUN_DIR = f"runs/{time.time()}"\nos.makedirs(RUN_DIR)\n'
          + "\n\ndef main():\n" + _TRAINING_BODY_INDENTED
          + '    torch.save(model.state_dict(), os.path.join(RUN_DIR, "model.pt"))\n'
          + '\n\nif __name__ == "__main__":\n    main()\n',
          "DDP316", ('RUN_DIR = f"runs/{time.time()}"',)),
)
