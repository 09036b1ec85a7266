"""Decisions every rank must take alike, on a value each rank computes on its own (DDP415, DDP416).

DDP keeps the wrapped module's parameters and buffers alike on every rank; a value each rank
computes by itself need not be. A validation every rank runs over the whole set (its figures
are not gathered: a meter, a corpus score) goes through modules DDP does not keep alike (a
frozen encoder left in train mode, whose BatchNorm statistics follow this rank's batches) and
through kernels that round differently from run to run. Where such a value decides what every
rank does next (a stop, a patience count, a learning-rate cut, a plateau scheduler's step),
the ranks split: one leaves the epoch loop while the others wait in the next all-reduce, or
the replicas step with different learning rates, silently.

Rule: the value is replaced where it is computed by rank 0's (`rank0_value(validate(...))`,
one small gather per evaluation), when that point is one every rank reaches alike: once per pass
of the epoch loop, under no test of its own figures, in no inner loop. Printing and saving
stay rank 0's. A value that decides nothing every rank does (printed, saved) is left alone:
each collective has a reason. Where the point is not certain, it is reported (DDP416).
"""
import builtins
from collections.abc import Callable, Sequence
from typing import Optional, Union

import libcst as cst

from ddpify.analysis.control import Facts
from ddpify.analysis.nodes import assigned_names, dotted_name, find_all, names_in
from ddpify.diagnostics import Rule, Severity
from ddpify.emit import collectives
from ddpify.emit.edits import Edits
from ddpify.plan import Plan
from ddpify.rules import report_only, training
from ddpify.rules.cases import TRAINING, Emits, Silent

RULES = (
    Rule("DDP415", Severity.EDIT, "a decision every rank takes reads rank 0's value",
         "A validation every rank runs on its own (over the whole set, its figures not "
         "gathered) can give each rank another figure: a module DDP does not keep alike (frozen, "
         "BatchNorm in train mode), kernels that round differently. Stopping, counting patience "
         "or cutting the learning rate on it would split the ranks: one leaves the loop while "
         "the others wait in an all-reduce, or they train with different learning rates. The "
         "figure is replaced where it is computed by rank 0's (one small gather per evaluation).",
         "Nothing to do; to have every rank's figure, gather it (dist.all_reduce) instead."),
    Rule("DDP419", Severity.EDIT, "a stop on this rank's own loss or clock reads rank 0's value",
         "`if loss.item() < threshold: break` or `while loss > eps:` in the epoch loop, on the last "
         "batch's figure, or `while time.time() - start < budget:`: each rank's last batch and clock "
         "are its own, so one rank would stop while the others wait in the next all-reduce (a hang on "
         "NCCL). The test is read once per epoch on every rank; the figure it reads is rank 0's there "
         "(`rank0_value(loss.item()) < threshold`, one small gather per epoch). Rank 0's last batch "
         "holds as many samples as the original's did, so the threshold keeps the meaning it was tuned "
         "for; a mean over the ranks would be a loss over N times as many samples, smoother, crossing "
         "the threshold at another epoch.",
         "Nothing to do; to stop on the mean over the ranks, all_reduce the figure (op=SUM, then divide "
         "by the world size) and test that."),
    Rule("DDP416", Severity.WARNING, "a value each rank computes on its own decides what every rank does",
         "The value (a validation every rank runs on its own) decides a stop, a patience count "
         "or a learning-rate change, but it is computed where the ranks may not all pass the "
         "same number of times (in an inner loop, under a test of a per-rank figure, in an "
         "except handler): a collective there could wait forever.",
         "Compute the value once per epoch on every rank, and take rank 0's: "
         "`value = rank0_value(value)`, rank 0's entry of an all-gather (or dist.broadcast)."),
)

HELPER_NAME = "rank0_value"
# Over `every_rank` (emit/collectives.py): dist.broadcast_object_list needs numpy, and pickle
# would bring a CUDA tensor back on rank 0's device; one small value per evaluation.
HELPER = '''\


def rank0_value(value):
    """Rank 0's `value` on every rank (the value itself outside a process group): a stop, a
    patience count or a learning-rate cut decided on a figure each rank computed on its own
    is then the same on every rank."""
    if not dist.is_initialized():
        return value
    return {every_rank}(value)[0]
'''

Loop = Union[cst.For, cst.While]
# Calls a test may make and still read the same on every rank when its names do.
_UNIFORM_CALLS = frozenset({"len", "int", "float", "min", "max", "abs", "round", "range"})


def plan(facts: Facts, edits: Edits, setup: Plan) -> None:
    epoch_loops = _epoch_loops(facts)
    if not epoch_loops:
        return
    batch_loops = set(training.batch_loops(facts))
    objects = _training_objects(facts)
    models = {model.name for model in facts.models}
    trained = _trained_per_rank(facts, setup)
    evaluated: dict[cst.FunctionDef, set[Optional[int]]] = {
        function: {None} for function in _evaluated_per_rank(facts, setup)}
    for function, positions in {**trained, **evaluated}.items():
        for call in facts.calls_of(function):
            loops = _loops_around(facts, call)
            epoch_loop = next((loop for loop in loops if loop in epoch_loops), None)
            if epoch_loop is None or not _decides(facts, epoch_loop, call, positions, objects,
                                                  plateaus=function not in trained) \
                    or _feeds_a_forward(facts, epoch_loop, call, positions, models):
                continue
            why = _not_reached_alike(facts, epoch_loop, call, loops, batch_loops)
            if why is not None:
                edits.report("DDP416", call, (
                    f"a value each rank computes on its own decides what every rank does: "
                    f"`{edits.code(call.func)}()` returns this rank's own figure and {why}; compute it "
                    f"once per epoch on every rank and take rank 0's value (dist.broadcast)"))
                continue
            _take_rank0_value(edits, setup, call)
    for loop in batch_loops:
        _take_rank0_epoch_figures(facts, edits, setup, loop, epoch_loops, objects)
    passes = _passes_per_rank(facts, setup)
    for epoch_loop in epoch_loops:
        _take_rank0_pass_figures(facts, edits, setup, epoch_loop, passes, objects)


def _take_rank0_value(edits: Edits, setup: Plan, value: cst.BaseExpression, code: str = "DDP415") -> None:
    gather = collectives.use(edits)
    edits.add_helper(HELPER_NAME, HELPER.format(every_rank=gather), "dist")
    edits.expressions[value] = lambda updated: cst.Call(cst.Name(HELPER_NAME), [cst.Arg(cast_expression(updated))])
    setup.rank0_values.add(value)
    edits.report(code, value)


def _take_rank0_epoch_figures(facts: Facts, edits: Edits, setup: Plan, loop: cst.For, epoch_loops: set[Loop],
                              objects: set[str]) -> None:
    """`last = loss.item()`, `avg = running / len(loader)` (not summed across ranks): a figure of
    this rank's batches, set in the epoch loop's own body after its batch loop, which every
    rank passes once per epoch. Where it decides what every rank does, it takes rank 0's value
    there; anywhere else (under a test, in an inner block) report_only.py reports the stop."""
    around = [outer for outer in _loops_around(facts, loop) if outer is not loop]
    if not around or around[0] not in epoch_loops or facts.function_of(around[0]) is not facts.function_of(loop):
        return
    epoch_loop = around[0]
    child = facts.ancestor_in(loop, epoch_loop.body)
    statements = list(epoch_loop.body.body)
    if child not in statements:
        return
    rank_local = report_only.rank_local_in(facts, setup, loop)
    last_batch = rank_local - _gathered_over_the_epoch(loop)
    if isinstance(epoch_loop, cst.While):
        _take_rank0_test_figures(facts, edits, setup, epoch_loop, epoch_loop.test, rank_local, last_batch)
    for statement in statements[statements.index(child) + 1:]:
        if isinstance(statement, cst.If) and _acts(facts, statement, objects):
            _take_rank0_test_figures(facts, edits, setup, epoch_loop, statement.test, rank_local, last_batch)
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if not isinstance(small, cst.Assign) or not names_in(small.value) & rank_local \
                    or not all(isinstance(target.target, cst.Name) for target in small.targets):
                continue
            if _decides_names(facts, epoch_loop, assigned_names(small), objects, plateaus=False):
                _take_rank0_value(edits, setup, small.value)


def _gathered_over_the_epoch(loop: cst.For) -> set[str]:
    """What the batch loop adds up over the epoch (`running += loss.item()`, `meter.update(...)`,
    `losses.append(...)`): a figure of this rank's share of the epoch, whose one-process meaning
    is the whole epoch's (the mean over the ranks, training.py's DDP402), not rank 0's share."""
    gathered = {name for augmented in find_all(loop.body, cst.AugAssign, into_functions=False)
                for name in names_in(augmented.target)}
    gathered |= {call.func.value.value for line in find_all(loop.body, cst.Expr, into_functions=False)
                 if isinstance(call := line.value, cst.Call) and isinstance(call.func, cst.Attribute)
                 and isinstance(call.func.value, cst.Name) and call.args}
    return gathered


def _take_rank0_test_figures(facts: Facts, edits: Edits, setup: Plan, epoch_loop: Loop, test: cst.BaseExpression,
                             rank_local: set[str], last_batch: set[str]) -> None:
    """`if loss.item() < threshold: break`, `while loss > eps:` (DDP419): a test of the epoch
    loop, which every rank passes once per epoch, on this rank's figure of its last batch. The
    operands that read it take rank 0's value (`rank0_value(loss.item()) < threshold`): rank 0's
    last batch is one of as many samples as the original's, so the threshold keeps the meaning it
    was tuned for (a mean over the ranks is a loss over N times as many samples, smoother, and
    crosses it at another epoch); one gather per epoch, none per step. A while loop's test on the
    clock (`while time.time() - start < budget:`) reads rank 0's clock alike. Only where nothing
    else in the test differs per rank (a name the operands leave out): report_only.py reports the
    rest."""
    clock_reads = {call for qualified in report_only.CLOCKS for call in facts.calls_named.get(qualified, ())}
    on_clock = [call for call in find_all(test, cst.Call) if call in clock_reads]
    if on_clock and facts.parents.get(test) is not epoch_loop:
        return  # an `if` on the clock: rank 0's clock is broadcast there (training.py, DDP405)

    def per_rank(side: cst.BaseExpression) -> bool:
        return bool(names_in(side) & rank_local) or any(facts.ancestor_in(call, side) is not None or call is side
                                                         for call in on_clock)

    operands = _operands_reading(test, per_rank)
    if any(operand in setup.rank0_values for operand in operands):
        return  # (taken already, from another batch loop of the same epoch loop)
    if not operands or any(names_in(operand) & rank_local - last_batch for operand in operands):
        return  # a figure of the epoch's batches: reported (report_only.py) where training.py does not sum it
    # What the epoch loop sets from those figures (`best = loss.item()`) differs per rank too.
    derived = set(rank_local)
    report_only.spread_through(epoch_loop.body, derived, rounds=2, modules=report_only.imported_modules(facts))
    if any(names_in(operand) & derived for operand in _operands_left(test, operands)):
        return
    for operand in operands:
        _take_rank0_value(edits, setup, operand, code="DDP419")


def _operands_reading(test: cst.BaseExpression,
                      per_rank: Callable[[cst.BaseExpression], bool]) -> list[cst.BaseExpression]:
    """The sides of the test's comparisons (through `and`, `or`, `not` and parentheses) that read
    a per-rank value; the whole test where it is no comparison (`if converged:`)."""
    if not per_rank(test):
        return []
    if isinstance(test, cst.BooleanOperation):
        return _operands_reading(test.left, per_rank) + _operands_reading(test.right, per_rank)
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return _operands_reading(test.expression, per_rank)
    if isinstance(test, cst.Comparison):
        sides = [test.left, *(target.comparator for target in test.comparisons)]
        return [side for side in sides if per_rank(side)]
    return [test]


def _operands_left(test: cst.BaseExpression, operands: list[cst.BaseExpression]) -> list[cst.BaseExpression]:
    """The parts of the test outside the operands taken (what still decides on its own)."""
    if any(test is operand for operand in operands):
        return []
    if isinstance(test, cst.BooleanOperation):
        return _operands_left(test.left, operands) + _operands_left(test.right, operands)
    if isinstance(test, cst.UnaryOperation):
        return _operands_left(test.expression, operands)
    if isinstance(test, cst.Comparison):
        sides = [test.left, *(target.comparator for target in test.comparisons)]
        return [side for side in sides if not any(side is operand for operand in operands)]
    return [test]


def cast_expression(node: cst.CSTNode) -> cst.BaseExpression:
    assert isinstance(node, cst.BaseExpression)
    return node


def _take_rank0_pass_figures(facts: Facts, edits: Edits, setup: Plan, epoch_loop: Loop, passes: set[cst.For],
                             objects: set[str]) -> None:
    """An evaluation written in the epoch loop itself (`for x, y in val_loader:
    losses.append(...)`, then `val_loss = np.average(losses)`), over data every rank goes
    through on its own, its figures not gathered: a figure set from what it filled, in the
    epoch loop's own statements (or a `with` block's) after it, takes rank 0's value where it
    decides what every rank does."""
    if not isinstance(epoch_loop.body, cst.IndentedBlock):
        return
    statements = _flat_statements(epoch_loop.body.body)
    for index, statement in enumerate(statements):
        if not isinstance(statement, cst.For) or statement not in passes:
            continue
        filled = assigned_names(statement.body) | set(names_in(statement.target)) | {
            call.func.value.value for call in find_all(statement.body, cst.Call, into_functions=False)
            if isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Name)}
        for later in statements[index + 1:]:
            for small in later.body if isinstance(later, cst.SimpleStatementLine) else ():
                if not isinstance(small, cst.Assign) or small.value in setup.rank0_values \
                        or not names_in(small.value) & filled \
                        or not all(isinstance(target.target, cst.Name) for target in small.targets):
                    continue
                if _decides_names(facts, epoch_loop, assigned_names(small), objects, plateaus=True):
                    _take_rank0_value(edits, setup, small.value)


def _flat_statements(statements: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """The statements of a block in order, with those of its `with` blocks in their place:
    every rank passes each of them once per pass of the block."""
    flat: list[cst.BaseStatement] = []
    for statement in statements:
        if isinstance(statement, cst.With) and isinstance(statement.body, cst.IndentedBlock):
            flat.extend(_flat_statements(statement.body.body))
        else:
            flat.append(statement)
    return flat


def _passes_per_rank(facts: Facts, setup: Plan) -> set[cst.For]:
    """Loops over data that do not train and whose figures evaluation.py does not gather."""
    batch_loops = set(training.batch_loops(facts))
    # (A count, `for _ in range(steps)` of an attack or a solver, goes over no data.)
    over_data = {loop for loops in facts.loops_over.values() for loop in loops
                 if not (isinstance(loop.iter, cst.Call) and dotted_name(loop.iter.func) == "range")}
    # A pass over a loader given a sampler covers this rank's share: rank 0's figure is no
    # stand-in for the whole set's (the pass is reported as such, DDP213).
    shares = {loop for _, loops in setup.training_loaders_evaluated for loop in loops}
    shares.update(facts.loops_over_values({(loader.function, loader.name) for loader in setup.loaders_given_a_sampler}))
    library = _library_names(facts)
    return {loop for loop in over_data if loop not in batch_loops and loop not in setup.gathered_evaluations
            and loop not in facts.training_loops and loop not in shares and _runs_a_model(loop, library)}


# Packages whose functions reshape, draw or compute on tensors: a call of theirs runs no model.
_TENSOR_LIBRARIES = frozenset({"torch", "numpy", "math", "random", "torchvision"})


def _library_names(facts: Facts) -> frozenset[str]:
    """Names a call through which runs no model of the script: builtins, imported modules
    (`np.clip`, `torch.randn_like`, `F.pad`) and what is imported from a tensor library
    (`from torch import nn`, `from numpy.random import randint`)."""
    imported = {(alias.asname.name.value if alias.asname is not None and isinstance(alias.asname.name, cst.Name)
                 else dotted_name(alias.name) or "")
                for node in facts.nodes_of(cst.ImportFrom) if not isinstance(node.names, cst.ImportStar)
                and _package(node) in _TENSOR_LIBRARIES for alias in node.names}
    return report_only.imported_modules(facts) | frozenset(dir(builtins)) | imported


def _package(node: cst.ImportFrom) -> str:
    """`from torch.nn import functional` -> "torch"; "" for a relative import."""
    module = dotted_name(node.module) if node.module is not None else None
    return (module or "").partition(".")[0]


def _runs_a_model(loop: cst.For, library: frozenset[str]) -> bool:
    """Whether the pass calls something besides the tensor library, builtins and methods of
    what the loop itself draws or makes (`holed[i].zero_()`): an evaluation runs a model;
    a loop over the corners of the holes it punches into a batch, or the noise levels it adds
    per sample, runs none (its result is a batch, no figure to take rank 0's of)."""
    own = names_in(loop.target) | assigned_names(loop.body)
    for call in find_all(loop.body, cst.Call, into_functions=False):
        callee = call.func
        while isinstance(callee, (cst.Attribute, cst.Subscript, cst.Call)):
            callee = callee.value if not isinstance(callee, cst.Call) else callee.func
        if not isinstance(callee, cst.Name) or callee.value not in library | own:
            return True
    return False


def _evaluated_per_rank(facts: Facts, setup: Plan) -> list[cst.FunctionDef]:
    """Functions of the file that return a value and go over a loader in a pass that is not
    training and whose figures evaluation.py does not gather: each rank's own evaluation."""
    passes = _passes_per_rank(facts, setup)
    found: list[cst.FunctionDef] = []
    for function in dict.fromkeys(facts.functions.values()):
        if function in facts.training_functions:
            continue
        returns = [returned for returned in facts.own_statements(function, cst.Return) if returned.value is not None]
        own_passes = [loop for loop in find_all(function.body, cst.For, into_functions=False) if loop in passes]
        if returns and own_passes:
            found.append(function)
    return found


def _trained_per_rank(facts: Facts, setup: Plan) -> dict[cst.FunctionDef, set[Optional[int]]]:
    """Functions whose batch loop trains and that return a figure of this rank's own batches
    (`return loss.item()`, the last batch's loss; not an epoch sum training.py all-reduces),
    with where it is in what they return (None: the whole value; k: the k-th of a tuple)."""
    found: dict[cst.FunctionDef, set[Optional[int]]] = {}
    for loop in training.batch_loops(facts):
        function = facts.function_of(loop)
        if function is None or function in found:
            continue
        positions = report_only.rank_local_positions(facts, function, report_only.rank_local_in(facts, setup, loop))
        if positions:
            found[function] = positions
    return found


def _epoch_loops(facts: Facts) -> set[Loop]:
    """The loops around training: the innermost loop around each batch loop, and around each
    call of a function that trains."""
    batch_loops = set(training.batch_loops(facts))
    trained_at: list[cst.CSTNode] = list(batch_loops)
    for function in facts.training_functions:
        trained_at.extend(facts.calls_of(function))
    found: set[Loop] = set()
    for node in trained_at:
        around = [loop for loop in _loops_around(facts, node) if loop is not node and loop not in batch_loops]
        found.update(around[:1])
    return found


def _loops_around(facts: Facts, node: cst.CSTNode) -> list[Loop]:
    """For and while loops whose body (or, for a while, test) holds node, innermost first,
    up to its function."""
    loops: list[Loop] = []
    child: cst.CSTNode = node
    parent = facts.parents.get(node)
    while parent is not None and not isinstance(parent, (cst.FunctionDef, cst.ClassDef)):
        if isinstance(parent, cst.For) and child is parent.body or isinstance(parent, cst.While):
            loops.append(parent)
        child, parent = parent, facts.parents.get(parent)
    return loops


def _training_objects(facts: Facts) -> set[str]:
    """The names what every rank trains with goes by: models, optimizers, schedulers."""
    objects = {model.name for model in facts.models} | set(facts.optimizer_names)
    for qualified, calls in facts.calls_named.items():
        if not qualified.startswith("torch.optim."):
            continue
        for call in calls:
            assign = facts.parents.get(call)
            if isinstance(assign, cst.Assign):
                objects |= {name for target in assign.targets if (name := dotted_name(target.target)) is not None}
    return objects


def _decides(facts: Facts, loop: Loop, call: cst.Call, positions: set[Optional[int]], objects: set[str],
             plateaus: bool) -> bool:
    """Whether the call's value (its per-rank `positions`), or what the epoch loop derives from
    it (`is_best`, a patience count, an early-stopping object it is handed to), decides what
    every rank does next. `plateaus`: a scheduler's step on it counts (a training figure's does
    not: training.py steps it on the ranks' mean, DDP409)."""
    statement = facts.statement_of(call)
    node: Optional[cst.CSTNode] = call
    while node is not None and node is not statement:
        parent = facts.parents.get(node)
        if isinstance(parent, (cst.If, cst.While)) and node is parent.test:
            return isinstance(parent, cst.While) or _acts(facts, parent, objects)
        if isinstance(parent, cst.Call) and _steps_training(parent, objects, besides=node) \
                and (plateaus or not _steps_a_scheduler(parent)):
            return True
        node = parent
    derived = report_only.names_given(statement, call, positions)
    return bool(derived) and _decides_names(facts, loop, derived, objects, plateaus)


def _feeds_a_forward(facts: Facts, loop: Loop, call: cst.Call, positions: set[Optional[int]],
                     models: set[str]) -> bool:
    """Whether what the call returns goes into a forward of a trained model (`gen(masked)`,
    `model(augment(x))`, through a rename or two): a batch the helper built from this rank's
    own, not a figure. Rank 0's batch on every rank would train each rank on another rank's
    inputs against its own targets (and gather a batch every step)."""
    def forwards(node: cst.CSTNode, names: set[str]) -> bool:
        return any(dotted_name(inner.func) in models and any(_reads(arg.value, names) for arg in inner.args)
                   for inner in find_all(node, cst.Call, into_functions=False))

    node: Optional[cst.CSTNode] = call
    statement = facts.statement_of(call)
    while node is not None and node is not statement:
        parent = facts.parents.get(node)
        if isinstance(parent, cst.Call) and dotted_name(parent.func) in models \
                and any(arg.value is node for arg in parent.args):
            return True
        node = parent
    derived = report_only.names_given(statement, call, positions)
    if not derived:
        return False
    report_only.spread_through(loop.body, derived, rounds=2, modules=report_only.imported_modules(facts))
    return forwards(loop.body, derived)


def _steps_a_scheduler(call: cst.Call) -> bool:
    return (dotted_name(call.func) or "").endswith(".step")


def _decides_names(facts: Facts, loop: Loop, derived: set[str], objects: set[str], plateaus: bool) -> bool:
    """Whether what these names hold, or what the epoch loop derives from them, decides what
    every rank does next."""
    derived = set(derived)
    modules = report_only.imported_modules(facts)
    for _ in range(2):  # an object called on the value (`early_stopping(val_loss)`) holds it afterwards
        report_only.spread_through(loop.body, derived, rounds=2, modules=modules)
        derived |= {call.func.value for line in find_all(loop.body, cst.Expr, into_functions=False)
                    if isinstance(call := line.value, cst.Call) and isinstance(call.func, cst.Name)
                    and call.func.value not in modules and any(_reads(arg.value, derived) for arg in call.args)}
    deciding = [test for test in find_all(loop.body, cst.If, into_functions=False) if _acts(facts, test, objects)]
    tests = [test.test for test in deciding] + ([loop.test] if isinstance(loop, cst.While) else [])
    if any(_reads(test, derived) for test in tests):
        return True
    return any(_steps_training(inner, objects) and (plateaus or not _steps_a_scheduler(inner))
               and any(_reads(arg.value, derived) for arg in inner.args)
               for inner in find_all(loop.body, cst.Call, into_functions=False))


def _acts(facts: Facts, test: cst.If, objects: set[str]) -> bool:
    """An `if` whose blocks change what every rank does: leave or skip a pass (break,
    continue, return, raise), or touch the model, an optimizer or a scheduler other than to
    print or save it."""
    outputs = set(facts.output_statements)
    written = set(facts.save_calls) | set(facts.helper_write_calls)
    blocks = [test.body] + ([test.orelse] if test.orelse is not None else [])
    for block in blocks:
        if any(isinstance(small, (cst.Break, cst.Continue, cst.Return, cst.Raise))
               for line in find_all(block, cst.SimpleStatementLine, into_functions=False) for small in line.body):
            return True
        for line in find_all(block, cst.SimpleStatementLine, into_functions=False):
            if line in outputs or any(call in written for call in find_all(line, cst.Call, into_functions=False)):
                continue
            if _reads(line, objects):
                return True
        if any(_reads(inner.iter, objects) for inner in find_all(block, cst.For, into_functions=False)):
            return True
    return False


def _steps_training(call: cst.Call, objects: set[str], besides: Optional[cst.CSTNode] = None) -> bool:
    """`scheduler.step(figure)`, `adjust_learning_rate(optimizer, ...)`: a call on a training
    object, or handed one (in an argument other than `besides`, the one the figure is in)."""
    func = dotted_name(call.func) or ""
    receiver, _, method = func.rpartition(".")
    if receiver in objects:
        return method in ("step", "load_state_dict")
    return func != "print" and any(_reads(arg.value, objects) for arg in call.args if arg is not besides)


def _reads(node: cst.CSTNode, names: set[str]) -> bool:
    if names_in(node) & names:
        return True
    return any(dotted_name(attribute) in names for attribute in find_all(node, cst.Attribute, into_functions=False))


def _not_reached_alike(facts: Facts, epoch_loop: Loop, call: cst.Call, loops: list[Loop],
                       batch_loops: set[cst.For]) -> Optional[str]:
    """Why the ranks may not all pass the call the same number of times (None when they do):
    between it and the epoch loop there is no loop but a training batch loop (each rank's
    sampler hands it as many batches), no except handler, and no `if` whose test reads what
    the epoch loop computes (a shared test, `epoch % 5 == 0` or `step % 100 == 0`, is fine)."""
    if any(loop not in batch_loops for loop in loops[:loops.index(epoch_loop)]):
        return "is computed in an inner loop"
    # Counted alike on every rank: the epoch, a step counter (`step += 1`), the index of an
    # `enumerate` over a batch loop's loader (each rank's sampler hands it as many batches).
    alike = report_only.step_counters(epoch_loop.body)
    alike |= names_in(epoch_loop.target) if isinstance(epoch_loop, cst.For) else set()
    for inner in loops[:loops.index(epoch_loop)]:
        if isinstance(inner, cst.For) and isinstance(inner.target, cst.Tuple) and inner.target.elements \
                and isinstance(inner.iter, cst.Call) and dotted_name(inner.iter.func) == "enumerate":
            alike |= names_in(inner.target.elements[0].value)
    assigned = assigned_names(epoch_loop.body) - alike
    child: cst.CSTNode = call
    node: Optional[cst.CSTNode] = facts.parents.get(call)
    while node is not None and node is not epoch_loop:
        if isinstance(node, (cst.ExceptHandler, cst.ExceptStarHandler)):
            return "is computed in an except handler"
        test = node.test if isinstance(node, (cst.If, cst.IfExp)) else None
        if test is not None and child is not test and not _shared_test(test, assigned):
            return "is computed under a test that may differ per rank"
        child, node = node, facts.parents.get(node)
    return None


def _shared_test(test: cst.BaseExpression, assigned: set[str]) -> bool:
    """A test on the epoch count, the script's settings and constants: alike on every rank."""
    if names_in(test) & assigned:
        return False
    return all(dotted_name(call.func) in _UNIFORM_CALLS for call in find_all(test, cst.Call))


# A validation every rank runs over the whole set: a meter keeps this rank's figures only.
_VALIDATION = TRAINING.replace("for epoch in range(3):\n", """\
val_loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=8)


def validate(model, loader):
    meter = Meter()
    with torch.no_grad():
        for x, y in loader:
            meter.update(torch.nn.functional.mse_loss(model(x.to(device)), y.to(device)).item())
    return meter.avg


best, bad = float("inf"), 0
for epoch in range(3):
""")
_PATIENCE = """\
    val_loss = validate(model, val_loader)
    if val_loss < best:
        best, bad = val_loss, 0
    else:
        bad += 1
    if bad >= 2:
        break
"""
CASES = (
    Emits(_VALIDATION.replace("    print(epoch, loss.item())\n", _PATIENCE), "DDP415",
          ("val_loss = rank0_value(validate(model, val_loader))",)),
    Emits(_VALIDATION.replace("    print(epoch, loss.item())\n",
                              "    if validate(model, val_loader) > best:\n        continue\n"), "DDP415",
          ("    if rank0_value(validate(model, val_loader)) > best:",)),
    # Printed only: no decision, no collective.
    Silent(_VALIDATION.replace("    print(epoch, loss.item())\n", "    print(validate(model, loader))\n"),
           "DDP415"),
    # The last batch's loss, set once per epoch after the batch loop, or returned by the
    # function that trains the epoch: this rank's own figure, rank 0's where it is set.
    Emits(TRAINING.replace("for epoch in range(3):\n", "best, bad = 1e9, 0\nfor epoch in range(3):\n")
          .replace("    print(epoch, loss.item())\n", _PATIENCE.replace("validate(model, val_loader)", "loss.item()")),
          "DDP415", ("    val_loss = rank0_value(loss.item())",)),
    Emits(report_only.EPOCH_FUNCTION.format(returned="loss.item()"), "DDP415",
          ("    last = rank0_value(train_epoch())",)),
    # A stop on the last batch's loss read in the epoch loop's test, or a while loop's (DDP419).
    Emits(TRAINING.replace("    print(epoch, loss.item())\n", "    if loss.item() < 0.01:\n        break\n"),
          "DDP419", ("    if rank0_value(loss.item()) < 0.01:",)),
    Emits(TRAINING.replace("for epoch in range(3):", "epoch, loss = 0, torch.ones(1)\nwhile loss > 0.01 and epoch < 3:")
          .replace("    print(epoch, loss.item())\n", "    epoch += 1\n"),
          "DDP419", ("while rank0_value(loss) > 0.01 and epoch < 3:",)),
    Emits(TRAINING.replace("import torch\n", "import time\n\nimport torch\n", 1)
          .replace("for epoch in range(3):",
                   "epoch, start = 0, time.time()\nwhile time.time() - start < 60 and epoch < 3:")
          .replace("    print(epoch, loss.item())\n", "    epoch += 1\n"),
          "DDP419", ("while rank0_value(time.time() - start) < 60 and epoch < 3:",)),
    # ... not where the other side is this rank's own too (`best = loss.item()`): reported as before.
    Silent(TRAINING.replace("for epoch in range(3):", "best = 1e9\nfor epoch in range(3):").replace(
        "    print(epoch, loss.item())\n", "    if loss.item() < best:\n        best = loss.item()\n"
        "        optimizer.zero_grad()\n"), "DDP419"),
    # Validated only when this rank's own last loss is low: not every rank gets there.
    Emits(_VALIDATION.replace("    print(epoch, loss.item())\n", "    if loss.item() < 0.5:\n    "
                              + _PATIENCE.replace("\n    ", "\n        ")), "DDP416"),
)
