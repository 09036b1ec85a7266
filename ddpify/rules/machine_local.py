"""Files in a machine's own folder (a temporary folder, /tmp, /dev/shm), written by each
machine's local rank 0 (DDP322).

Rank 0 alone writes the files the run keeps, on the assumption that the run's folders are on
a file system every rank sees. A temporary folder is not: it is on one machine's own disk. A
file written there during training and read back by every rank (the best weights so far,
reloaded when training ends) exists on rank 0's machine only, and every rank of a second
machine fails to read it. So each machine's local rank 0 writes its own copy (the replicas
hold equal weights, so the copies are equal bytes), into a folder made on its machine, and
every rank reads its own machine's copy after the barrier that DDP309 places before the read.
On one machine local rank 0 is rank 0: nothing changes there.
"""
import libcst as cst

from ddpify.analysis import names
from ddpify.analysis.control import Facts
from ddpify.analysis.nodes import dotted_name, find_all, names_in
from ddpify.diagnostics import Rule, Severity
from ddpify.emit.edits import Edits, Insertion
from ddpify.plan import Plan
from ddpify.rules import report_only, training
from ddpify.rules.cases import TRAINING, Emits, Silent
from ddpify.rules.downloads import LOCAL_RANK_ZERO, LOCAL_RANK_ZERO_IN_HELPER

RULES = (
    Rule("DDP322", Severity.EDIT, "file in a machine's own temporary folder written by each machine's local rank 0",
         "A temporary folder (TemporaryDirectory(), mkdtemp(), a path under /tmp or /dev/shm) is on "
         "one machine's own disk: a file rank 0 alone writes there is missing on every other "
         "machine, and its ranks fail when they read it back. Each machine's local rank 0 writes "
         "its own copy (the replicas are equal, so the copies are too), in a folder made on that "
         "machine, and the other ranks read it after a barrier.",
         "Nothing to do; to keep one copy, write it to a folder on shared storage instead."),
    Rule("DDP945", Severity.WARNING, "file in a machine's own temporary folder written on a figure each rank has alone",
         "A file in a temporary folder (on one machine's own disk) is written, and read back by "
         "every rank, under a test of a figure each rank computes from its own batches (`if "
         "loss.item() < best:`). Rank 0 alone writing it leaves the other machines without the "
         "file; each machine's local rank 0 writing its own copy would decide on its own figure, "
         "so the machines would reload different weights. The write is left to rank 0.",
         "Decide on a figure every rank shares (the epoch's loss summed over the loader, which "
         "ddpify reduces across ranks), or keep the file in a folder on shared storage."),
)

# Where a path that starts so lies: on this machine's own disk, whatever the cluster shares.
MACHINE_LOCAL_PREFIXES = ("/tmp/", "/dev/shm/", "/var/tmp/")
MACHINE_LOCAL_FOLDERS = frozenset({"/tmp", "/dev/shm", "/var/tmp"})
# Calls whose value names a temporary folder or file of this machine.
MACHINE_LOCAL_CALLS = frozenset({"tempfile.mkdtemp", "tempfile.mkstemp", "tempfile.gettempdir",
                                 "tempfile.NamedTemporaryFile", "tempfile.TemporaryDirectory"})
RANK_ZERO_GUARDS = frozenset({"is_main", "is_main_process()"})

# Local rank 0 removes the folder (`shutil.rmtree(scratch)` after the best weights are
# reloaded): every rank of its machine must have read from it first.
READ_BEFORE_REMOVED_CODE = """\
if dist.is_initialized():
    dist.barrier()  # every rank has read from the folder local rank 0 removes next
"""
REMOVALS = frozenset({"shutil.rmtree", "os.remove", "os.unlink", "os.rmdir"})

HELPER = '''\


def chosen_on_this_machine(value):
    """This machine's local rank 0's value on each of its ranks: a temporary folder is on one
    machine's own disk, made there by its local rank 0, which writes the files in it."""
    if not dist.is_initialized():
        return value
    return every_rank(value)[dist.get_rank() - int(os.environ.get("LOCAL_RANK", 0))]
'''


def plan(facts: Facts, edits: Edits, setup: Plan) -> None:
    literals = _machine_local_literals(facts)
    local_names = machine_local_names(facts, literals)
    if not local_names and not literals:
        return
    for statement, guard in list(edits.guarded.items()):
        if guard in RANK_ZERO_GUARDS and _writes_into(facts, statement, local_names, set(literals)):
            if _decided_per_rank(facts, setup, statement):
                edits.report("DDP945", statement)
                continue
            in_sight = guard == "is_main" and setup.sees_setup(facts, statement)
            edits.guarded[statement] = LOCAL_RANK_ZERO if in_sight else LOCAL_RANK_ZERO_IN_HELPER
            if not in_sight:
                edits.imports.update({"os", "dist"})
            if _removes(facts, statement):
                waiting = Insertion(edits.statements(READ_BEFORE_REMOVED_CODE), takes_comments=True)
                edits.insert_before(statement, waiting)
                edits.imports.add("dist")
            edits.report("DDP322", statement)


def add_helper(edits: Edits) -> None:
    """`chosen_on_this_machine`, which shared_names wraps a temporary folder's name in."""
    edits.add_helper("chosen_on_this_machine", HELPER, "dist", "os")


def machine_local_names(facts: Facts, literals: list[cst.BaseExpression]) -> set[str]:
    """Names (and `args.x` attributes) whose value is a path on this machine's own disk: the
    target of `with TemporaryDirectory() as d`, of `d = tempfile.mkdtemp()`, of a literal
    under /tmp, of a command-line option whose default is one; and names built from those
    (`best = os.path.join(d, "best.pt")`)."""
    found: set[str] = set()
    for qualified in MACHINE_LOCAL_CALLS:
        for call in facts.calls_named.get(qualified, ()):
            found |= _bound_by(facts, call)
    for literal in literals:
        found |= _bound_by(facts, literal)
    if not found:
        return found
    for _ in range(4):  # names built from those, a few assignments deep
        grown = {name for name, values in facts.assigned_values.items() if name not in found
                 and any(_mentions(value, found) for value in values)}
        if not grown:
            break
        found |= grown
    return found


def _machine_local_literals(facts: Facts) -> list[cst.BaseExpression]:
    """String literals naming a path on this machine's own disk (f-strings by their start)."""
    literals: list[cst.BaseExpression] = []
    strings: list[cst.BaseExpression] = [*find_all(facts.module, cst.SimpleString),
                                         *find_all(facts.module, cst.FormattedString)]
    for node in strings:
        if isinstance(node, cst.SimpleString):
            text = node.evaluated_value if isinstance(node.evaluated_value, str) else ""
        elif isinstance(node, cst.FormattedString):
            first = node.parts[0] if node.parts else None
            text = first.value if isinstance(first, cst.FormattedStringText) else ""
        if text.startswith(MACHINE_LOCAL_PREFIXES) or text in MACHINE_LOCAL_FOLDERS:
            literals.append(node)
    return literals


def _bound_by(facts: Facts, node: cst.CSTNode) -> set[str]:
    """The name the value at node is bound to: an assignment's target, a `with ... as` name,
    a default's option (`add_argument("--scratch", default="/tmp/x")` binds `.scratch`)."""
    for ancestor in _ancestors(facts, node):
        if isinstance(ancestor, cst.WithItem) and ancestor.asname is not None:
            return _target_names(ancestor.asname.name)
        if isinstance(ancestor, (cst.Assign, cst.AnnAssign)):
            targets = [t.target for t in ancestor.targets] if isinstance(ancestor, cst.Assign) else [ancestor.target]
            return {name for target in targets for name in _target_names(target)}
        if isinstance(ancestor, cst.Arg) and ancestor.keyword is not None and ancestor.keyword.value == "default":
            return _option_destination(facts.parents.get(ancestor))
        if isinstance(ancestor, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            return set()
    return set()


def _ancestors(facts: Facts, node: cst.CSTNode):
    parent = facts.parents.get(node)
    while parent is not None:
        yield parent
        parent = facts.parents.get(parent)


def _target_names(target: cst.BaseExpression) -> set[str]:
    name = dotted_name(target) if isinstance(target, (cst.Name, cst.Attribute)) else None
    return {name} if name is not None else set()


def _option_destination(call: object) -> set[str]:
    """`add_argument("--scratch-dir", default=...)`: `.scratch_dir` on whatever holds the options."""
    if not isinstance(call, cst.Call) or not isinstance(call.func, cst.Attribute):
        return set()
    if call.func.attr.value != "add_argument":
        return set()
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == "dest" and isinstance(arg.value, cst.SimpleString):
            return {"." + str(arg.value.evaluated_value)}
    for arg in call.args:
        if arg.keyword is None and isinstance(arg.value, cst.SimpleString):
            flag = str(arg.value.evaluated_value)
            if flag.startswith("--"):
                return {"." + flag[2:].replace("-", "_")}
    return set()


def _mentions(node: cst.CSTNode, local_names: set[str]) -> bool:
    if names_in(node) & local_names:
        return True
    dotted = {name for name in map(dotted_name, find_all(node, cst.Attribute)) if name is not None}
    return any(name in local_names or any(name.endswith(option) for option in local_names if option.startswith("."))
               for name in dotted)


def _writes_into(facts: Facts, statement: cst.CSTNode, local_names: set[str],
                 literals: set[cst.BaseExpression]) -> bool:
    """The guarded statement makes or writes a file whose path mentions a machine-local name
    or is written out (`torch.save(state, "/tmp/best.pt")`)."""
    writers = set(facts.save_calls)
    for qualified in names.OPEN | names.MAKE_DIRECTORIES | names.DUMP_TO_FILE:
        writers.update(facts.calls_named.get(qualified, ()))
    for call in find_all(statement, cst.Call):
        if call in writers and any(_mentions(arg.value, local_names) or _holds_any(arg.value, literals)
                                   for arg in call.args):
            return True
    return False


def _removes(facts: Facts, statement: cst.CSTNode) -> bool:
    removals = {call for qualified in REMOVALS for call in facts.calls_named.get(qualified, ())}
    return any(call in removals for call in find_all(statement, cst.Call))


def _holds_any(node: cst.CSTNode, literals: set[cst.BaseExpression]) -> bool:
    strings = [*find_all(node, cst.SimpleString), *find_all(node, cst.FormattedString)]
    return any(string in literals for string in strings)


def _decided_per_rank(facts: Facts, setup: Plan, statement: cst.CSTNode) -> bool:
    """Rule: an `if` around the write, within its function, tests a name bound from this
    rank's own batches (`loss`, not the epoch sums training.py all-reduces), or one made from
    it: each machine's writer would decide on its own figure."""
    function = facts.function_of(statement)
    local: set[str] = set()
    for loop in training.batch_loops(facts):
        if facts.function_of(loop) is function:
            local |= report_only.rank_local_in(facts, setup, loop)
    for _ in range(2):
        local |= {name for name, values in facts.assigned_values.items()
                  if any(names_in(value) & local for value in values)}
    return any(isinstance(ancestor, cst.If) and names_in(ancestor.test) & local
               for ancestor in _ancestors(facts, statement) if facts.function_of(ancestor) is function)


CASES = (
    Emits("import tempfile\n" + TRAINING.replace(
        "for epoch", 'scratch = tempfile.mkdtemp()\nfor epoch')
          + 'torch.save(model.state_dict(), scratch + "/best.pt")\n'
          + 'model.load_state_dict(torch.load(scratch + "/best.pt"))\n',
          "DDP322", ("scratch = chosen_on_this_machine(tempfile.mkdtemp())", "if local_rank == 0:")),
    # Decided on this rank's last batch loss: each machine would keep other weights.
    Emits(TRAINING.replace("optimizer.step()", 'optimizer.step()\n        if loss.item() < 0.5:\n'
                           '            torch.save(model.state_dict(), "/tmp/best.pt")')
          + 'model.load_state_dict(torch.load("/tmp/best.pt"))\n', "DDP945", ()),
    Silent(TRAINING + 'torch.save(model.state_dict(), "best.pt")\n', "DDP322"),
)
