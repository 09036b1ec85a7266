"""DataLoader workers sized by the machine's CPU count are shared among its processes (DDP222)."""
from collections.abc import Iterator
from typing import Optional

import libcst as cst

from ddpify.analysis.control import Facts
from ddpify.analysis.nodes import dotted_name, find_all, string_value
from ddpify.diagnostics import Rule, Severity
from ddpify.emit.edits import Edits, replacement
from ddpify.plan import Plan
from ddpify.rules.cases import TRAINING, Emits, Silent

RULES = (
    Rule("DDP222", Severity.EDIT, "loader workers: the machine's CPUs shared among its processes",
         "`num_workers=os.cpu_count()` starts one loading worker per CPU in each process. Under "
         "torchrun there is one process per GPU, so a machine with 8 GPUs would start 8 times as "
         "many workers as it has CPUs, each with its own copy of the dataset: memory, shared "
         "memory and CPU time run out. Each process takes its share, at least one; as a group of "
         "one the count is the original's.",
         "Nothing to do."),
)

# Calls that count the machine's CPUs (`len(os.sched_getaffinity(0))` counts them too).
CPU_COUNTS = frozenset({"os.cpu_count", "multiprocessing.cpu_count", "psutil.cpu_count", "os.process_cpu_count"})
AFFINITY = "os.sched_getaffinity"
WORKERS = "num_workers"
SHARE_CODE = 'max(1, {count} // int(os.environ.get("LOCAL_WORLD_SIZE", 1)))'


def plan(facts: Facts, edits: Edits, setup: Plan) -> None:
    """Rule: a CPU count that sizes a loader's workers (`num_workers=os.cpu_count()`, in a
    DataLoader call or a dict of its arguments, `min(4, os.cpu_count())`, a setting assigned
    from it, `NUM_WORKERS = cpu_count() - 1`, or an option whose default it is, handed on as
    `num_workers=`) becomes this process's share of the machine's CPUs. torchrun sets
    LOCAL_WORLD_SIZE, the number of processes on this machine; unset, the count is as before."""
    for count in _counts_sizing_workers(facts):
        edits.expressions[count] = replacement(edits, SHARE_CODE.format(count=edits.code(count)))
        edits.imports.add("os")
        edits.report("DDP222", count)


def _counts_sizing_workers(facts: Facts) -> Iterator[cst.BaseExpression]:
    handed = _names_handed_as_workers(facts)
    for count in _cpu_counts(facts):
        if _sizes_workers(facts, count, handed):
            yield count


def _cpu_counts(facts: Facts) -> list[cst.BaseExpression]:
    counts: list[cst.BaseExpression] = [call for name in sorted(CPU_COUNTS) for call in facts.calls_named.get(name, ())]
    for call in facts.calls_named.get(AFFINITY, ()):
        arg = facts.parents.get(call)
        outer = facts.parents.get(arg) if arg is not None else None  # the call it is handed to
        if isinstance(outer, cst.Call) and dotted_name(outer.func) == "len":
            counts.append(outer)
    return counts


def _names_handed_as_workers(facts: Facts) -> set[str]:
    """The dotted names given as `num_workers=` anywhere (`NUM_WORKERS`, `args.workers`), and
    the last part of each (an option's destination)."""
    named: set[str] = set()
    for arg in find_all(facts.module, cst.Arg):
        if arg.keyword is not None and arg.keyword.value == WORKERS:
            name = dotted_name(arg.value)
            if name is not None:
                named.add(name)
    return named


def _sizes_workers(facts: Facts, count: cst.BaseExpression, handed: set[str]) -> bool:
    parent = facts.parents.get(count)
    if isinstance(parent, cst.BinaryOperation) and isinstance(parent.operator, cst.FloorDivide) \
            and "local_world_size" in facts.module.code_for_node(parent.right).lower():
        return False  # shared already (`os.cpu_count() // local_world_size`)
    node: Optional[cst.CSTNode] = count
    while node is not None and not isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
        parent = facts.parents.get(node)
        if isinstance(node, cst.Arg) and node.keyword is not None:  # (a keyword argument)
            if node.keyword.value == WORKERS:
                return True
            if node.keyword.value == "default" and isinstance(parent, cst.Call):
                return _option_destination(parent) in {name.rsplit(".", 1)[-1] for name in handed if "." in name}
        if isinstance(node, cst.DictElement) and string_value(node.key) == WORKERS:
            return True
        if isinstance(parent, cst.Assign) and node is parent.value:
            return any(dotted_name(target.target) in handed for target in parent.targets)
        node = parent
    return False


def _option_destination(call: cst.Call) -> Optional[str]:
    """`parser.add_argument("--eval-workers", default=...)` -> eval_workers (or its `dest=`)."""
    if not (isinstance(call.func, cst.Attribute) and call.func.attr.value == "add_argument"):
        return None
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == "dest":
            return string_value(arg.value)
    flags = [string_value(arg.value) for arg in call.args if arg.keyword is None]
    longs = [flag for flag in flags if flag and flag.startswith("--")]
    chosen = longs[0][2:] if longs else next((flag.lstrip("-") for flag in flags if flag), None)
    return chosen.replace("-", "_") if chosen else None


CASES = (
    Emits("import os\n" + TRAINING.replace("batch_size=8, shuffle=True)", "batch_size=8, shuffle=True, "
                                             "num_workers=os.cpu_count())"), "DDP222",
          ('num_workers=max(1, os.cpu_count() // int(os.environ.get("LOCAL_WORLD_SIZE", 1)))',)),
    Silent("import os\n" + TRAINING.replace("batch_size=8, shuffle=True)", "batch_size=8, shuffle=True, "
                                              "num_workers=2)\nprint(os.cpu_count())"), "DDP222"),
)
