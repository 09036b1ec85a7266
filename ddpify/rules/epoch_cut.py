"""An epoch cut at the whole data set's count of batches (DDP224).

GAN code often ends each pass one batch early, where the last, smaller batch would start:
`if i == len(loader.dataset) // batch_size: break` (or `loader.dataset.__len__()`), so that
targets made once with `torch.ones(batch_size, 1)` always match the batch. Sharded, a rank's
loader yields 1/world_size of the data set, so that step is never reached: the last partial
batch arrives, and the loss fails on its shape (or trains on it). The count a rank can reach
is its sampler's length, `len(loader.sampler)`: a DistributedSampler's share under torchrun,
and the data set's length as a group of one (the loader's own RandomSampler or
SequentialSampler), so plain `python` cuts where the original did.
"""
from typing import Optional, Union

import libcst as cst

from ddpify.analysis.control import Facts
from ddpify.analysis.figures import batch_cap
from ddpify.analysis.nodes import dotted_name, find_all
from ddpify.diagnostics import Rule, Severity
from ddpify.emit.edits import Edits, replacement
from ddpify.options import Options
from ddpify.plan import Plan
from ddpify.rules import schedule_length
from ddpify.rules.cases import TRAINING, Emits, Silent

RULES = (
    Rule("DDP224", Severity.EDIT, "the epoch cut at the data set's count of batches counts this rank's share",
         "The training pass stops at a step computed from the whole data set's length "
         "(`if i == len(loader.dataset) // batch_size: break`), to leave out the last, "
         "smaller batch. Sharded, a rank's loader yields only its share of the data set, so "
         "that step is never reached and the last partial batch is trained on (or fails "
         "against targets made for a full batch). The length is read from the loader's "
         "sampler instead: the rank's share under torchrun, the whole data set as a group of "
         "one.",
         "Nothing to do; `drop_last=True` on the DataLoader says the same in one place."),
    Rule("DDP418", Severity.INFO, "the epoch stops after a count of steps that a rank's share may not reach",
         "The training pass breaks after a count of its own (`if step >= max_steps_per_epoch: "
         "break`). Sharded, every rank still stops at that step, so the optimizer steps as often "
         "as one process did, each step on N batches (DDP206). A rank's share holds len(loader) / N "
         "batches, rounded up: with more ranks than len(loader) / k, the pass ends at the end of the "
         "share instead, on every rank alike (DistributedSampler evens the shares), with fewer steps "
         "than the original, and a schedule sized from the count (`total_steps=epochs * k`) never "
         "reaches its end.",
         "Nothing to do while k <= len(loader) / N; above that, size the schedule from "
         "`min(k, len(train_loader))`."),
)


def plan(facts: Facts, edits: Edits, setup: Plan) -> None:
    """In each training pass over a loader that is sharded (here, or by the module of the
    project that builds it), a `break` under a test that reads the loader's data set's length reads its
    sampler's length instead."""
    loaders: dict[cst.For, set[str]] = {}
    datasets: dict[cst.For, set[str]] = {}
    for loader in setup.loaders_given_a_sampler:
        if loader.keywords.keys() & {"sampler", "batch_sampler"}:
            continue  # the script's own sampler: its length is not the data set's
        if edits.options.keep_global_batch and schedule_length.batch_size_given(loader):
            continue  # its batch is divided by the world size (DDP403): as many batches a rank as before
        holders = facts.loader_holders_of(loader)
        dataset = dotted_name(loader.dataset) if loader.dataset is not None else None
        for loop in facts.loops_over_values(holders):
            loaders.setdefault(loop, set()).update(
                name for name in facts.names_iterated_by(loop)
                if (facts.function_of(loop), name) in holders or (None, name) in holders)
            if dataset is not None and facts.function_of(loop) is loader.function:
                datasets.setdefault(loop, set()).add(dataset)
    for external in facts.external_loaders:  # built, and sharded by look, by another module
        holders = facts.holders_from(external.function, external.name)
        for loop in facts.loops_over_values(holders):
            loaders.setdefault(loop, set()).update(
                name for name in facts.names_iterated_by(loop)
                if any(name == held and facts.sees_value(loop, held, function) for function, held in holders))
    for loop, iterated in loaders.items():
        if facts.loop_trains(loop) and len(iterated) == 1:  # else which sampler stands for the set is a guess
            _cut_by_sampler(edits, loop, next(iter(iterated)), datasets.get(loop, set()))
            _report_step_count_cut(facts, edits, loop)


def _cut_by_sampler(edits: Edits, loop: cst.For, loader: str, datasets: set[str]) -> None:
    for test in _break_tests(loop):
        for call in find_all(test, cst.Call):
            if _dataset_length(call, loader, datasets):
                edits.expressions[call] = replacement(edits, f"len({loader}.sampler)")
                edits.standalone.add(call)
                edits.report("DDP224", call)


def _report_step_count_cut(facts: Facts, edits: Edits, loop: cst.For) -> None:
    """Rule: `for step, batch in enumerate(loader): if step >= k: break`, k a count of the
    script's own (not the data set's length, DDP224): every rank stops at step k as one process
    did while its share lasts, so the migration keeps it, and says where a share ends first. A
    count set from a length (`self.len_epoch = len(self.data_loader)`) follows the share."""
    cap = batch_cap(loop.iter) or _islice_stop(loop.iter)
    if cap is not None and not _set_from_a_length(facts, cap):
        edits.report("DDP418", cap)  # `zip(range(k), loader)`, `itertools.islice(loader, k)`
        return
    outer = facts.enclosing_for_and_while_loops(loop)
    counters = _step_counters(loop)
    # `while global_step < max_steps:` (or `while keep_training:`, a flag the pass clears at the
    # count) around the pass starts passes until the count is reached, however few batches a
    # share holds: the budget is met on every rank.
    set_in_pass = counters | {target.value for assign in find_all(loop.body, cst.AssignTarget, into_functions=False)
                              for target in [assign.target] if isinstance(target, cst.Name)}
    if not counters or any(isinstance(around, cst.While) and _names_of(around.test) & set_in_pass for around in outer):
        return
    # The pass's own breaks, and those of the epoch loop around it (`if global_step >=
    # max_steps: break` after the pass): a count the pass keeps stops the training either way.
    for test in [*_break_tests(loop), *(_break_tests(outer[0]) if outer else [])]:
        if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1 or find_all(test, cst.Call):
            continue
        sides = (test.left, test.comparisons[0].comparator)
        counted = [side for side in sides if counters & _names_of(side)]
        counts = [side for side in sides if not counters & _names_of(side)]
        if len(counted) == 1 and not any(_set_from_a_length(facts, count) for count in counts):
            edits.report("DDP418", test)
            return


def _islice_stop(iterated: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """k in `itertools.islice(loader, k)` (or `islice(loader, start, k)`, under enumerate or
    tqdm): the pass takes the first k batches, as a break at step k would."""
    for call in find_all(iterated, cst.Call):
        if (dotted_name(call.func) or "").rsplit(".", 1)[-1] == "islice" and len(call.args) in (2, 3):
            stop = call.args[len(call.args) - 1 if len(call.args) == 2 else 2].value
            if not (isinstance(stop, cst.Name) and stop.value == "None"):
                return stop
    return None


def _step_counters(loop: cst.For) -> set[str]:
    """The names that count the pass's steps: `step` in `for step, (x, y) in enumerate(loader)`,
    and a name the pass adds a whole number to at every step, in its own body (`global_step +=
    1`); not one added to under a test (an early stop's `bad += 1`), nor a sum of losses."""
    counters = {counter} if (counter := _enumerate_counter(loop)) is not None else set()
    return counters | {
        added.target.value for line in _simple_lines(loop.body) for added in line.body
        if isinstance(added, cst.AugAssign) and isinstance(added.operator, cst.AddAssign)
        and isinstance(added.target, cst.Name) and isinstance(added.value, cst.Integer)}


def _set_from_a_length(facts: Facts, count: cst.BaseExpression, depth: int = 0) -> bool:
    """The count reads a length, itself or through the names it is computed from (`remaining =
    epoch * steps_per_epoch - step` after `steps_per_epoch = len(train_loader)`, a resumed
    epoch's rest): it follows the share."""
    if depth > 2:
        return False
    values = [count] if depth == 0 and not isinstance(count, (cst.Name, cst.Attribute)) else \
        facts.assigned_values.get(dotted_name(count) or "", [])
    return any(dotted_name(call.func) == "len" for value in values for call in find_all(value, cst.Call)) or any(
        _set_from_a_length(facts, name, depth + 1) for value in values for name in find_all(value, cst.Name)
        if name is not count and dotted_name(name) != dotted_name(count))


def _enumerate_counter(loop: cst.For) -> Optional[str]:
    """`step` in `for step, (x, y) in enumerate(loader)`."""
    if not (isinstance(loop.iter, cst.Call) and dotted_name(loop.iter.func) == "enumerate"):
        return None
    target = loop.target
    if isinstance(target, cst.Tuple) and target.elements and isinstance(target.elements[0].value, cst.Name):
        return target.elements[0].value.value
    return None


def _names_of(node: cst.BaseExpression) -> set[str]:
    return {name.value for name in find_all(node, cst.Name)}


def _break_tests(loop: Union[cst.For, cst.While]) -> list[cst.BaseExpression]:
    """The tests of the `if`s of the loop's body (not of a loop nested in it) that break
    out of it."""
    nested = [node for kind in (cst.For, cst.While) for node in find_all(loop.body, kind, into_functions=False)]
    inner = {id(node) for outer in nested for node in find_all(outer.body, cst.If, into_functions=False)}
    tests = []
    for branch in find_all(loop.body, cst.If, into_functions=False):
        if id(branch) in inner:
            continue
        if any(isinstance(small, cst.Break) for line in _simple_lines(branch.body) for small in line.body):
            tests.append(branch.test)
    return tests


def _simple_lines(suite: cst.BaseSuite) -> list[Union[cst.SimpleStatementSuite, cst.SimpleStatementLine]]:
    """The lines of small statements of a suite (a nested `if` or `with` is none of them)."""
    if isinstance(suite, cst.SimpleStatementSuite):
        return [suite]
    return [line for line in suite.body if isinstance(line, cst.SimpleStatementLine)]


def _dataset_length(call: cst.Call, loader: str, datasets: set[str]) -> bool:
    """`len(loader.dataset)`, `loader.dataset.__len__()`, or `len(train_set)` of the data
    set the loader was built over."""
    func = call.func
    if isinstance(func, cst.Name) and func.value == "len" and len(call.args) == 1 and not call.args[0].star:
        read = _data_set_of(call.args[0].value, loader)
        return read or dotted_name(call.args[0].value) in datasets
    if isinstance(func, cst.Attribute) and func.attr.value == "__len__" and not call.args:
        return _data_set_of(func.value, loader)
    return False


def _data_set_of(node: cst.BaseExpression, loader: str) -> bool:
    return (isinstance(node, cst.Attribute) and node.attr.value == "dataset"
            and dotted_name(node.value) == loader)


def _cut(step: str) -> str:
    return TRAINING.replace("    for x, y in loader:\n",
                            f"    for step, (x, y) in enumerate(loader):\n        if {step}:\n            break\n")


CASES = (
    Emits(_cut("step == len(loader.dataset) // 8"), "DDP224", ("len(loader.sampler) // 8",)),
    Emits(_cut("step >= loader.dataset.__len__() // 8"), "DDP224", ("len(loader.sampler) // 8",)),
    Emits(_cut("step == len(dataset) // 8"), "DDP224", ("len(loader.sampler) // 8",)),
    # A cut at a count of its own (a debugging limit) is not the data set's.
    Silent(_cut("step == 3"), "DDP224"),
    Emits(_cut("step >= max_steps"), "DDP418", ()),
    Emits(_cut("step + 1 == 3"), "DDP418", ()),
    Silent(_cut("step == len(dataset) // 8"), "DDP418"),
    Silent(_cut("loss.item() < 0.1"), "DDP418"),
    Emits(TRAINING.replace("for x, y in loader:", "for _, (x, y) in zip(range(3), loader):"), "DDP418", ()),
    Silent(_cut("step == steps").replace("for epoch", "steps = len(loader)\nfor epoch"), "DDP418"),
    Emits(TRAINING.replace("for x, y in loader:", "for i, (x, y) in enumerate(islice(loader, 0, 5)):").replace(
        "import torch\n", "from itertools import islice\n\nimport torch\n"), "DDP418", ()),
    Silent(TRAINING.replace("for x, y in loader:", "for x, y in islice(loader, None):").replace(
        "import torch\n", "from itertools import islice\n\nimport torch\n"), "DDP418"),
    # A counter the pass keeps, tested in the pass or in the epoch loop around it.
    Emits(TRAINING.replace("        optimizer.step()\n", "        optimizer.step()\n        steps += 1\n").replace(
        "    print(epoch, loss.item())\n", "    if steps >= 20:\n        break\n").replace(
        "for epoch", "steps = 0\nfor epoch"), "DDP418", ()),
    # The rest of a resumed epoch, computed from the loader's length: the share's.
    Silent(TRAINING.replace("for x, y in loader:", "for x, y in islice(loader, rest):").replace(
        "import torch\n", "from itertools import islice\n\nimport torch\n").replace(
        "for epoch in range(3):\n", "per_epoch = len(loader)\nstep = 0\nfor epoch in range(3):\n"
        "    rest = (epoch + 1) * per_epoch - step\n"), "DDP418"),
    # A budget of steps a `while` on the count keeps passing over the data to reach.
    Silent(TRAINING.replace("        optimizer.step()\n", "        optimizer.step()\n        steps += 1\n"
                            "        if steps >= 20:\n            break\n").replace(
        "for epoch in range(3):", "steps = 0\nwhile steps < 20:"), "DDP418"),
    Silent(TRAINING.replace("        optimizer.step()\n", "        optimizer.step()\n        steps += 1\n"
                            "        if steps >= 20:\n            going = False\n            break\n").replace(
        "for epoch in range(3):", "steps, going = 0, True\nwhile going:"), "DDP418"),
    # A sum of losses is no count of steps.
    Silent(TRAINING.replace("        optimizer.step()\n", "        optimizer.step()\n        total += loss\n"
                            "        if total > 5.0:\n            break\n").replace(
               "for epoch", "total = 0.0\nfor epoch"), "DDP418"),
    # --keep-global-batch divides the batch instead: each rank reaches the original count.
    Silent(_cut("step == len(dataset) // 8"), "DDP224", Options(keep_global_batch=True)),
    # A break under a test whose body also holds a block of its own (`if args.dry_run:`).
    Silent(TRAINING.replace("        optimizer.step()\n",
                            "        optimizer.step()\n        if epoch == 2:\n"
                            "            if loss.item() < 0.1:\n                print(loss.item())\n"
                            "            break\n"), "DDP224"),
)
