"""Patterns ddpify reports and never rewrites (DDP902, DDP909, DDP406).

A `break` decided on this rank's own batch loss, or on its own clock (a time budget:
`time.time() - start > budget`), stops one rank while the others wait in the next all-reduce.
Each rank reads its own clock, and near the limit they read it on different sides of it.
Making it safe would need an all-reduce of the decision on every step, which the original did
not pay for; the person who owns the script chooses.
"""

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Optional, Union, cast

import libcst as cst

from ddpify.analysis import memo, seeding, traversal
from ddpify.analysis.control import Facts, receiver_of
from ddpify.analysis.facts import BlockItem, Statement
from ddpify.analysis.nodes import (
    assigned_names,
    calls_within,
    dotted_name,
    find_all,
    names_in,
    names_within,
    targets_bound_in,
    within,
)
from ddpify.diagnostics import Rule, Severity
from ddpify.emit.edits import Edits
from ddpify.plan import Plan
from ddpify.rules import training
from ddpify.rules.cases import TRAINING, Emits, Silent

RULES = (
    Rule("DDP902", Severity.WARNING, "rank-divergent control flow may hang a collective",
         "A break or return decided on a value only one rank has leaves the other ranks "
         "waiting in the next all-reduce.",
         "Decide on a value all ranks share (all-reduce it first), or decide on every rank."),
    Rule("DDP406", Severity.WARNING, "state kept per sample is written from this rank's samples only",
         "A tensor kept across batches (a memory bank, per-sample soft labels or weights) is "
         "written at the indices of the batch. Under DDP each rank sees only its shard, so each "
         "rank's copy is updated for its own samples: the copies drift apart, and every rank "
         "reads stale entries for the samples the other ranks saw.",
         "Gather the indices and values from every rank (dist.all_gather) and write all of them "
         "on every rank, or keep a state that each rank only reads for its own samples."),
    Rule("DDP408", Severity.WARNING, "a training setting chosen from this rank's own losses differs per rank",
         "A value picked by comparing this rank's own batch losses (an LR finder's best "
         "learning rate, `lr = lrs[argmin(losses)]`) is handed to an optimizer or scheduler. "
         "Each rank saw other batches, so each may pick another value: the replicas then "
         "step with different settings and drift apart, silently (DDP averages gradients, "
         "not the settings that apply them).",
         "Decide on figures every rank shares (all_reduce the losses before comparing them), "
         "or pick on rank 0 and broadcast the value (dist.broadcast) before building the optimizer."),
    Rule("DDP909", Severity.WARNING, "an import ddpify cannot follow: the module it loads is not migrated",
         "The module is chosen when the script runs (importlib, __import__, a sys.path "
         "entry added by the script), so ddpify cannot tell which of the project's files it "
         "is: if that module trains, prints or saves, it stays single-process.",
         "Import the module by name, or migrate it yourself: run ddpify on it as a module "
         "of this project (`ddpify -i that_module.py`)."),
)

# Each rank reads its own clock: a decision on the time differs between ranks near the limit.
CLOCKS = ("time.time", "time.perf_counter", "time.monotonic", "time.process_time", "time.time_ns",
          "time.perf_counter_ns", "time.monotonic_ns", "timeit.default_timer", "datetime.datetime.now",
          "datetime.datetime.utcnow", "datetime.datetime.today")


def report_dynamic_imports(facts: Facts, edits: Edits) -> None:
    for call in facts.dynamic_imports:
        edits.report("DDP909", call)


# In-place tensor methods that write at given indices (`bank.index_copy_(0, idx, feats)`).
INDEX_WRITES = frozenset({"index_copy_", "index_add_", "index_fill_", "index_put_", "scatter_",
                          "scatter_add_", "scatter_reduce_", "put_"})


def report_per_sample_state(facts: Facts, edits: Edits) -> None:
    """A training batch loop that writes, at positions read from the batch itself (`for x, y,
    idx in loader`), into a tensor it does not bind: `bank[idx] = feats`,
    `soft_labels[index] = ...`, `memory.index_copy_(0, idx, feats)`. The tensor outlives the
    batch (a memory bank, per-sample labels), and each rank writes its own shard's entries
    only. Reported, not rewritten: gathering costs a collective per step the original did not
    pay. A method of a class of this file the loop hands the batch's indices
    (`bank.update(idx, feats)`) is followed one level: a write there into an attribute of the
    instance (`self.bank[idx] = ...`) at the parameter that receives them is reported at
    the call."""
    shown = _Shown(facts)
    for loop in training.batch_loops(facts):
        from_batch = names_in(loop.target)
        bound = from_batch | _plainly_bound(loop.body)
        for node, state in _index_writes(loop.body, from_batch, bound):
            if not shown.only_shown(loop, state):
                _report_written(edits, node, edits.code(state))
        for call in find_all(loop.body, cst.Call, into_functions=False):
            method = facts.method_called(call)
            if method is None or not isinstance(call.func, cst.Attribute):
                continue
            params = [param.name.value for param in method.params.params][1:]  # after self
            given = {param for param, arg in zip(params, call.args)
                     if arg.keyword is None and not arg.star and names_in(arg.value) & from_batch}
            given |= {arg.keyword.value for arg in call.args
                      if arg.keyword is not None and names_in(arg.value) & from_batch}
            for _, state in _index_writes(method.body, given, set(params)):
                if edits.code(state).startswith("self."):
                    _report_written(edits, call, edits.code(call.func.value) + edits.code(state)[4:])
                    break


# What shows a value and decides nothing: printing, logging, plotting, and the objects that
# draw or log (a visdom window, a TensorBoard writer, a logger, a figure's axes).
_SHOWING_PREFIXES = ("matplotlib.", "visdom.", "logging.", "wandb.", "torch.utils.tensorboard.", "tensorboardX.")
_SHOWING_CALLS = frozenset({"builtins.print", "pprint.pprint", "sys.stdout.write", "sys.stderr.write"})


class _Shown:
    """Rule: a tensor or list the batch loop writes at the batch's positions is not a state
    that drifts when nothing but output reads it: `iter_losses[i] = loss.item()` drawn with
    `vis.line(Y=iter_losses[: i + 1])` or `plt.plot(...)`, printed or logged. Each rank then
    shows its own batches' figures, and only rank 0 shows anything (DDP301), which is what the
    original showed for its batches. Every other read (a name assigned from it and read
    elsewhere, a model, a loss, a return), or no read at all in the scope, keeps the report."""

    def __init__(self, facts: Facts) -> None:
        self.facts = facts
        self.qualified = {call: name for name, calls in facts.calls_named.items() for call in calls}

    def only_shown(self, loop: cst.For, state: cst.BaseExpression) -> bool:
        name = dotted_name(state)
        function = self.facts.function_of(loop)
        if name is None:
            return False
        owner = self.facts.class_of(function) if name.startswith("self.") else None
        scope: cst.CSTNode = owner or (function.body if function is not None else self.facts.module)
        derived: set[str] = set()
        reads = self._reads(scope, {name})
        if not reads:
            return False  # read nowhere here: another module or method may decide on it
        for read in reads:
            if self._shown(read):
                continue
            statement = self.facts.statement_of(read)
            assigned = _plain_assignment(statement)
            if assigned is None or assigned & {name}:
                return False
            derived |= assigned  # `y_axis = iter_losses[: i + 1]`, shown in turn
        return all(self._shown(read) for read in self._reads(scope, derived)) if derived else True

    def _reads(self, scope: cst.CSTNode, names: set[str]) -> list[cst.CSTNode]:
        """Where the scope reads one of `names` (not where it assigns or writes into it)."""
        found: list[cst.CSTNode] = []
        for node in [*find_all(scope, cst.Name), *find_all(scope, cst.Attribute)]:
            if dotted_name(node) in names and not self._written(node):
                found.append(node)
        return found

    def _written(self, node: cst.CSTNode) -> bool:
        child, parent = node, self.facts.parents.get(node)
        while isinstance(parent, (cst.Subscript, cst.SubscriptElement, cst.Index, cst.Slice)) or (
                isinstance(parent, cst.Attribute) and parent.value is child):
            if isinstance(parent, cst.SubscriptElement):
                return False  # an index read inside a subscript
            child, parent = parent, self.facts.parents.get(parent)
        return isinstance(parent, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign)) and getattr(
            parent, "target", None) is child

    def _shown(self, node: cst.CSTNode) -> bool:
        """Inside an argument of a call that prints, logs or plots."""
        child, parent = node, self.facts.parents.get(node)
        while parent is not None and not isinstance(parent, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            if isinstance(parent, cst.Call) and child is not parent.func and self._shows(parent):
                return True
            child, parent = parent, self.facts.parents.get(parent)
        return False

    def _shows(self, call: cst.Call) -> bool:
        qualified = self.qualified.get(call, "")
        if qualified in _SHOWING_CALLS or qualified.startswith(_SHOWING_PREFIXES):
            return True
        if not isinstance(call.func, cst.Attribute):
            return False
        owner = dotted_name(call.func.value)
        return owner is not None and any(
            isinstance(value, cst.Call) and self.qualified.get(value, "").startswith(_SHOWING_PREFIXES)
            for value in self.facts.assigned_values.get(owner, ()))


def _plain_assignment(statement: Statement) -> Optional[set[str]]:
    """The names a one-assignment statement binds (`y = x[: i + 1]`); None for anything else."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    small = statement.body[0]
    if not isinstance(small, cst.Assign):
        return None
    names = {dotted_name(target.target) for target in small.targets}
    return None if None in names else cast(set[str], names)


def _index_writes(body: cst.CSTNode, indices: set[str],
                  bound: set[str]) -> list[tuple[cst.CSTNode, cst.BaseExpression]]:
    """(the write, the tensor written) for each write in `body` into a tensor `body` does not
    bind, at positions read from `indices`."""
    found: list[tuple[cst.CSTNode, cst.BaseExpression]] = []
    for assign in find_all(body, cst.Assign, into_functions=False):
        for target in assign.targets:
            written = target.target
            if isinstance(written, cst.Subscript) and _kept(written.value, bound) and any(
                    names_in(element) & indices for element in written.slice):
                found.append((assign, written.value))
    for call in find_all(body, cst.Call, into_functions=False):
        func = call.func
        if (isinstance(func, cst.Attribute) and func.attr.value in INDEX_WRITES
                and _kept(func.value, bound) and any(names_in(arg.value) & indices for arg in call.args)):
            found.append((call, func.value))
    return found


def _report_written(edits: Edits, node: cst.CSTNode, state: str) -> None:
    edits.report("DDP406", node, f"state kept per sample is written from this rank's samples only: "
                                 f"gather the batch's indices and values from every rank "
                                 f"(dist.all_gather) and write them all into `{state}`")


def _kept(value: cst.BaseExpression, bound: set[str]) -> bool:
    """A plain or dotted name (`bank`, `self.bank`) the loop does not bind itself."""
    name = dotted_name(value)
    return name is not None and (name.split(".")[0] == "self" or name.split(".")[0] not in bound)


def _plainly_bound(body: cst.CSTNode) -> set[str]:
    """Names assigned whole in `body` (`x = ...`, `a, b = ...`), not those written into."""
    bound: set[str] = set()
    for assign in find_all(body, cst.Assign, into_functions=False):
        for target in assign.targets:
            if isinstance(target.target, (cst.Name, cst.Tuple, cst.List)):
                bound |= names_in(target.target)
    return bound


# Exceptions every rank receives at once (torchrun forwards a signal to each worker) or that
# end the process: a handler for these alone does not let one rank go on by itself.
_SHARED_EXCEPTIONS = frozenset({"KeyboardInterrupt", "SystemExit", "GeneratorExit"})
_EXITS = frozenset({"sys.exit", "exit", "quit", "os._exit", "os.abort"})


def report_skipped_steps(facts: Facts, edits: Edits, setup: Plan) -> None:
    """A training step inside `try:` whose handler swallows the error and goes on: `try:
    loss.backward(); optimizer.step() except RuntimeError: continue`, the out-of-memory skip
    (`except torch.cuda.OutOfMemoryError: torch.cuda.empty_cache(); continue`), `except
    Exception as e: print(e); return None` in a step function called from a loop. Under DDP
    the rank that failed skips its backward (or its wrapped model's forward, which broadcasts
    buffers) while the others wait for it in the all-reduce: NCCL hangs until its timeout,
    Gloo errors at the next collective. Rule: a `try` whose body (not its handlers) holds a
    backward, an optimizer step, a call of a function of this file that trains, or, in a loop
    that trains, a call of a model being wrapped, and that sits in a loop (or in a function
    called from one), is reported (DDP902, at the handler) for each handler that can end
    without re-raising: some way through it does not reach a `raise` (or sys.exit). A handler
    for KeyboardInterrupt or SystemExit alone is left alone (every rank gets the signal), and
    so is a `try` around an evaluation every rank runs whole; one around an evaluation whose
    figures ddpify gathers is reported too (_gathered_evaluations). Never rewritten: the fix is the author's (let it
    raise, or decide the skip on every rank: all_reduce a failure flag, skip when any rank
    failed)."""
    steps: list[cst.CSTNode] = [*facts.training_calls, *facts.training_helper_calls]
    models = set(setup.wrap_points)
    for loop in facts.training_loops:
        steps.extend(call for call in find_all(loop.body, cst.Call, into_functions=False)
                     if dotted_name(call.func) in models)
    seen: set[cst.Try] = set()
    for node in steps:
        for guarded in _tries_around(facts, node, seen):
            if _goes_on_in_a_loop(facts, guarded):
                _report_handlers(edits, facts, guarded, "training")
    for node in _gathered_evaluations(facts, setup):
        for guarded in _tries_around(facts, node, seen):
            _report_handlers(edits, facts, guarded, "evaluation")


def _tries_around(facts: Facts, node: cst.CSTNode, seen: set[cst.Try]) -> list[cst.Try]:
    """The `try` statements of node's own function whose body holds it, not seen before."""
    found: list[cst.Try] = []
    child: cst.CSTNode = node
    parent = facts.parents.get(node)
    while parent is not None and not isinstance(parent, (cst.FunctionDef, cst.Module)):
        if isinstance(parent, cst.Try) and child is parent.body and parent not in seen:
            seen.add(parent)
            found.append(parent)
        child, parent = parent, facts.parents.get(parent)
    return found


def _report_handlers(edits: Edits, facts: Facts, guarded: cst.Try, what: str) -> None:
    for handler in guarded.handlers:
        if not _shared_exception(handler) and not _always_leaves(facts, _statements(handler.body)):
            _report_skipped(edits, facts, guarded, handler, what)


def _gathered_evaluations(facts: Facts, setup: Plan) -> list[cst.CSTNode]:
    """Rule: an evaluation whose figures ddpify gathers from every rank is a collective, as a
    training step is. Each rank runs its shard and then waits for the others in the gather:
    a rank whose error a handler swallows never arrives (or arrives at the next collective,
    out of step). The gathered loops, and the calls of the functions of this file that hold
    one, three calls deep (`validate()` calling `evaluate()`), are what a `try` must not
    swallow an error of. Unlike a training step, no loop is needed around the `try`: the
    ranks that did not fail are already waiting in the gather."""
    found: list[cst.CSTNode] = list(setup.gathered_evaluations)
    functions = {facts.function_of(loop) for loop in setup.gathered_evaluations} - {None}
    for _ in range(3):
        calls = [call for function in functions for call in facts.calls_of(function) if call not in found]
        found.extend(calls)
        functions = {facts.function_of(call) for call in calls} - {None}
    return found


def _goes_on_in_a_loop(facts: Facts, node: cst.Try) -> bool:
    """The try sits in a loop of its function, or in a function called from a loop."""
    if facts.within_a_loop(node):
        return True
    function = facts.function_of(node)
    return function is not None and any(facts.enclosing_loops(call) for call in facts.calls_of(function))


def _shared_exception(handler: cst.ExceptHandler) -> bool:
    caught = handler.type
    if caught is None:
        return False
    names = [element.value for element in caught.elements] if isinstance(caught, cst.Tuple) else [caught]
    return all((dotted_name(name) or "").split(".")[-1] in _SHARED_EXCEPTIONS for name in names)


def _always_leaves(facts: Facts, body: Sequence[cst.BaseStatement]) -> bool:
    """Every way through the statements raises (or exits the process): a statement that
    raises is reached before any that could go on (`continue`, `break`, `return`), and an
    `if` raises only if both its branches do."""
    for statement in body:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.Raise):
                    return True
                if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call) and _exits(facts, small.value):
                    return True
                if isinstance(small, (cst.Continue, cst.Break, cst.Return)):
                    return False
        elif isinstance(statement, cst.If) and _if_always_leaves(facts, statement):
            return True
        elif _may_go_on(statement):
            return False
    return False


def _if_always_leaves(facts: Facts, statement: cst.If) -> bool:
    orelse = statement.orelse
    if orelse is None or not _always_leaves(facts, _statements(statement.body)):
        return False
    if isinstance(orelse, cst.If):
        return _if_always_leaves(facts, orelse)
    return _always_leaves(facts, _statements(orelse.body))


def _statements(suite: cst.BaseSuite) -> Sequence[cst.BaseStatement]:
    """The statements of a block, a one-line one (`except E: continue`) as one line."""
    if isinstance(suite, cst.IndentedBlock):
        return suite.body
    return [cst.SimpleStatementLine(body=cast(cst.SimpleStatementSuite, suite).body)]


def _may_go_on(node: cst.CSTNode) -> bool:
    """A continue, break or return somewhere in the statement."""
    return bool(find_all(node, cst.Continue, into_functions=False) or find_all(node, cst.Break, into_functions=False)
                or find_all(node, cst.Return, into_functions=False))


def _exits(facts: Facts, call: cst.Call) -> bool:
    return dotted_name(call.func) in _EXITS or any(
        call in facts.calls_named.get(qualified, ()) for qualified in _EXITS)


def _report_skipped(edits: Edits, facts: Facts, node: cst.Try, handler: cst.ExceptHandler, what: str) -> None:
    line = facts.positions[node].start.line
    caught = f"except {edits.code(handler.type)}" if handler.type is not None else "except"
    if what == "evaluation":
        edits.report("DDP902", handler, (
            f"rank-divergent control flow may hang a collective: the evaluation in the `try:` at line "
            f"{line} gathers its figures from every rank, and it goes on after `{caught}` without "
            f"re-raising, so a rank that fails skips the gather while the other ranks wait in it (NCCL "
            f"hangs); let it raise, or evaluate the whole set on every rank (--no-shard-eval)"))
        return
    edits.report("DDP902", handler, (
        f"rank-divergent control flow may hang a collective: the training step in the `try:` at "
        f"line {line} goes on after `{caught}` without re-raising, so this rank skips its backward "
        f"while the other ranks wait for it in the all-reduce (NCCL hangs); let it raise, or skip "
        f"on every rank: all_reduce a failure flag (op=MAX) and skip when any rank failed"))


def report_settings_chosen_per_rank(facts: Facts, edits: Edits, setup: Plan) -> None:
    """Rule: a training setting must be the same on every rank. A name is per-rank when a
    training batch loop binds it from its batch (the loop's target, `xb, yb = next(it)`),
    or assigns it from a per-rank name or under a test that reads one (`if loss.item() <
    best_loss: best_loss, best_lr = loss.item(), lr`); after the loop the same spreads on
    through the statements of its function, and through a call of that function to the
    names its per-rank result is assigned (`lr = lr_finder(model, loader)`). A per-rank
    name read by an optimizer or scheduler of torch.optim (`SGD(params, lr=lr)`,
    `OneCycleLR(opt, max_lr=lr)`) or written into a param group (`group["lr"] = lr`) is
    reported (DDP408) there: nothing hangs, the replicas drift apart. Never rewritten (which
    rank's choice, or a shared one, is the author's). Epoch figures that training.py sums
    across ranks are shared, and so is what is decided on them."""
    modules = imported_modules(facts)
    for loop in training.batch_loops(facts):
        local = _from_batches(facts, loop, modules)
        # Names assigned rank 0's value (rank0_values.py) are the same on every rank.
        shared: set[str] = {name for value in setup.rank0_values
                            if isinstance(assign := facts.parents.get(value), cst.Assign)
                            for name in assigned_names(assign)}
        if loop in setup.reduced_epoch_loops:  # the epoch sums training.py all-reduces are shared
            shared |= set(training.epoch_accumulators(facts, loop)) | set(training.epoch_lists(facts, loop))
            shared |= setup.reduced_meters.get(loop, set())
        local -= shared
        function = facts.function_of(loop)
        spread_through(function.body if function is not None else facts.module, local, rounds=2, shared=shared,
                        modules=modules)
        _report_settings_read(facts, edits, function, local)
        if function is None:
            continue
        _report_settings_kept_on_the_object(facts, edits, function, local, modules)
        positions = rank_local_positions(facts, function, local)
        if not positions:
            continue
        for call in facts.calls_of(function):
            caller = facts.function_of(call)
            given = names_given(facts.statement_of(call), call, positions)
            if not given:
                continue
            spread_through(caller.body if caller is not None else facts.module, given, rounds=2,
                            modules=modules)
            _report_settings_read(facts, edits, caller, given)
    # `suggested_lr, lrs, losses = find_lr(model, train_loader, ...)` with find_lr in another
    # module of the project: what it picks from its own batches is per-rank here.
    for call, positions in facts.calls_returning_picked.items():
        caller = facts.function_of(call)
        given = names_given(facts.statement_of(call), call, positions)
        if given:
            spread_through(caller.body if caller is not None else facts.module, given, rounds=2,
                            modules=modules)
            _report_settings_read(facts, edits, caller, given)


def _report_settings_kept_on_the_object(facts: Facts, edits: Edits, function: cst.FunctionDef,
                                        local: set[str], modules: frozenset[str]) -> None:
    """Rule: a per-rank value the method keeps on its object (`self.lr = lrs[argmin(losses)]`
    in an LR finder) is per-rank wherever the class's other methods read it: `self.lr` there
    is spread and reported as a per-rank name is (`group["lr"] = self.lr`, `OneCycleLR(opt,
    max_lr=self.lr)`, DDP408)."""
    owner = facts.class_of(function)
    receiver = receiver_of(facts, function)
    if owner is None or receiver is None:
        return
    kept: set[str] = set()
    for assign in find_all(function.body, cst.Assign, into_functions=False):
        if names_in(assign.value) & (local - {receiver}):
            kept |= {target.attr.value for target in _flattened([t.target for t in assign.targets])
                     if isinstance(target, cst.Attribute) and dotted_name(target.value) == receiver}
    if not kept:
        return
    for method in owner.body.body:
        if not isinstance(method, cst.FunctionDef) or method is function:
            continue
        own = receiver_of(facts, method)
        if own is None:
            continue
        read = {f"{own}.{attribute}" for attribute in kept}
        spread_through(method.body, read, rounds=2, modules=modules)
        _report_settings_read(facts, edits, method, read)


def _flattened(targets: list[cst.BaseExpression]) -> list[cst.BaseExpression]:
    """Assignment targets, with those of tuples and lists (`best, self.lr = ...`) one by one."""
    found: list[cst.BaseExpression] = []
    for target in targets:
        if isinstance(target, (cst.Tuple, cst.List)):
            found += _flattened([element.value for element in target.elements])
        else:
            found.append(target)
    return found


def _read_in(node: Optional[cst.CSTNode], local: set[str]) -> set[str]:
    """The per-rank names `node` reads: names, and attributes (`self.lr`) where the per-rank
    value is one kept on an object."""
    if node is None:
        return set()
    found = names_in(node) & local
    if any("." in name for name in local):
        found |= {name for attribute in find_all(node, cst.Attribute, into_functions=False)
                  if (name := dotted_name(attribute)) in local}
    return found


def imported_modules(facts: Facts) -> frozenset[str]:
    """Names `import X` / `import X as Y` bind in this module: modules, not objects."""
    return frozenset(
        (alias.asname.name.value if alias.asname is not None and isinstance(alias.asname.name, cst.Name)
         else (dotted_name(alias.name) or "").partition(".")[0])
        for node in facts.nodes_of(cst.Import) for alias in node.names)


def spread_through(scope: cst.CSTNode, local: set[str], rounds: int, shared: Collection[str] = (),
                    modules: Collection[str] = ()) -> None:
    """Add to `local` the names the scope assigns from per-rank names or under tests that read
    them, and the objects it feeds them to, `rounds` times over (a chain of a few steps).
    `shared` names stay out: the epoch sums training.py all-reduces after the batch loop are
    the same on every rank, though the loop adds this rank's losses to them."""
    for _ in range(rounds):
        _spread_rank_local(scope, local, False, shared)
        local |= _fed_rank_local(scope, local, modules) - set(shared)


def rank_local_positions(facts: Facts, function: cst.FunctionDef, local: set[str]) -> set[Optional[int]]:
    """Where the function's returns hold a per-rank name: None for the whole value, k for the
    k-th element of a returned tuple."""
    positions: set[Optional[int]] = set()
    for returned in facts.own_statements(function, cst.Return):
        value = returned.value
        if isinstance(value, cst.Tuple):
            positions |= {index for index, element in enumerate(value.elements) if names_in(element.value) & local}
        elif value is not None and names_in(value) & local:
            positions.add(None)
    return positions


def _from_batches(facts: Facts, loop: cst.For, modules: frozenset[str]) -> set[str]:
    """The names a batch loop binds from its batches, spread through its body."""
    target: cst.BaseExpression = loop.target
    counting = dotted_name(loop.iter.func) if isinstance(loop.iter, cst.Call) else None
    if counting == "range":
        target = cst.Tuple([])  # a step count, the same on every rank
    elif counting == "enumerate" and isinstance(target, cst.Tuple) and len(target.elements) == 2:
        target = target.elements[1].value  # `for i, (x, y) in enumerate(loader)`: not `i`
    drawn: set[str] = set()
    for assign in find_all(loop.body, cst.Assign, into_functions=False):
        if any(dotted_name(call.func) == "next" for call in calls_within(assign.value)):
            drawn |= assigned_names(assign)
    # Batches drawn by hand in the body (`xb, yb = next(it)`) of a loop over something that
    # is no loader (`for lr in lrs:` of an LR sweep): its target is the same on every rank.
    if drawn and not _iterates_a_loader(facts, loop):
        target = cst.Tuple([])
    local = (set(names_in(target)) | drawn) - step_counters(loop.body)
    spread_through(loop.body, local, rounds=3, modules=modules)
    return local


def _iterates_a_loader(facts: Facts, loop: cst.For) -> bool:
    """The loop's iterable names a DataLoader (of this module or another) or a parameter or
    variable one goes to."""
    function = facts.function_of(loop)
    loaders = {name for holder, name in facts.loader_holders() if holder is function}
    loaders |= {loader.name for loader in facts.external_loaders if loader.function is function}
    loaders |= {loaders.name for loaders in facts.external_loader_dicts if loaders.function is function}
    return bool(set(names_in(loop.iter)) & loaders)


def _report_settings_read(facts: Facts, edits: Edits, function: Optional[cst.FunctionDef], local: set[str]) -> None:
    if not local:
        return
    reported = {(d.line, d.code) for d in edits.diagnostics}
    # An optimizer built with a per-rank setting is not itself the setting to name.
    local = local - {name for qualified, calls in facts.calls_named.items() if qualified.startswith("torch.optim.")
                     for call in calls for name in _assigned_by(facts, call)}
    for qualified, calls in facts.calls_named.items():
        if not qualified.startswith("torch.optim."):
            continue
        for call in calls:
            if facts.function_of(call) is not function:
                continue
            # The settings: not the parameters, optimizer or model it is built on (the first
            # argument, `params=`, `optimizer=`, `model=`).
            settings = [arg for index, arg in enumerate(call.args) if (
                arg.keyword.value not in ("params", "optimizer", "model") if arg.keyword is not None
                else index > 0 and not arg.star)]
            read = {name for arg in settings for name in _read_in(arg.value, local)}
            if read and (facts.positions[call].start.line, "DDP408") not in reported:
                _report_setting(edits, call, read, edits.code(call.func))
    _step_plateaus_on_shared(facts, edits, function, local, reported)
    for assign in facts.nodes_of(cst.Assign):
        if facts.function_of(assign) is not function or not _read_in(assign.value, local):
            continue
        for target in assign.targets:
            written = target.target
            if isinstance(written, cst.Subscript) and len(written.slice) == 1 and isinstance(
                    written.slice[0].slice, cst.Index) and isinstance(written.slice[0].slice.value, cst.SimpleString) \
                    and written.slice[0].slice.value.evaluated_value in ("lr", "momentum", "weight_decay") \
                    and (facts.positions[assign].start.line, "DDP408") not in reported:
                _report_setting(edits, assign, _read_in(assign.value, local), edits.code(written))


PLATEAU = "torch.optim.lr_scheduler.ReduceLROnPlateau"


def _step_plateaus_on_shared(facts: Facts, edits: Edits, function: Optional[cst.FunctionDef], local: set[str],
                             reported: set[tuple[int, str]]) -> None:
    """`scheduler.step(loss)` on a ReduceLROnPlateau (`scheduler = ReduceLROnPlateau(opt)`,
    `self.scheduler = lr_scheduler.ReduceLROnPlateau(...)`) with a per-rank figure: the
    learning rate is a setting chosen from it. Rule: a figure a scheduler decides on must be
    the same on every rank. Stepped once per epoch on every rank alike (not in a batch loop,
    not in an except handler, not under a test that reads a per-rank figure), the figure is
    made the ranks' mean where it is handed in (training.step_plateau_on_mean, DDP409: one
    all-reduce per epoch). Anywhere else an all-reduce would run per batch or on some ranks
    only: reported (DDP408) with the fix. Figures ddpify already shares (epoch sums, gathered
    evaluation figures, an evaluation left whole on every rank) are not per-rank and pass."""
    schedulers = {dotted_name(target.target) for call in facts.calls_named.get(PLATEAU, ())
                  if isinstance(assign := facts.parents.get(call), cst.Assign) for target in assign.targets}
    steps = {f"{name}.step" for name in schedulers if name is not None}
    if not steps:
        return
    scope: cst.CSTNode = function.body if function is not None else facts.module
    batch_loops = set(training.batch_loops(facts))
    for call in find_all(scope, cst.Call, into_functions=False):
        if dotted_name(call.func) not in steps or not call.args or call.args[0].star:
            continue
        figure = call.args[0].value
        read = names_in(figure) & local
        line = facts.positions[call].start.line
        if not read or (line, "DDP408") in reported or (line, "DDP409") in reported:
            continue
        reported.add((line, "DDP409"))
        why = _not_once_per_epoch(facts, call, local, batch_loops)
        if why is None:
            training.step_plateau_on_mean(edits, figure)
            continue
        edits.report("DDP408", call, (
            f"a training setting chosen from this rank's own losses differs per rank: "
            f"`{edits.code(call.func)}` lowers the learning rate on `{', '.join(sorted(read))}`, this rank's "
            f"own figure, {why}; all_reduce the figure (op=SUM, then divide by the world size) once per "
            f"epoch on every rank and step on that"))


def _not_once_per_epoch(facts: Facts, call: cst.Call, local: set[str], batch_loops: set[cst.For]) -> Optional[str]:
    """Why an all-reduce placed at the call would not run once per epoch on every rank alike
    (None when it would)."""
    if any(loop in batch_loops for loop in facts.enclosing_loops(call)):
        return "stepped in the batch loop (an all-reduce there would run at every batch)"
    node: Optional[cst.CSTNode] = facts.parents.get(call)
    while node is not None and not isinstance(node, (cst.FunctionDef, cst.Module)):
        if isinstance(node, (cst.ExceptHandler, cst.ExceptStarHandler)):
            return "stepped in an except handler (some ranks only)"
        if isinstance(node, (cst.If, cst.While)) and names_in(node.test) & local:
            return "stepped under a test on this rank's own figures (some ranks only)"
        node = facts.parents.get(node)
    return None


def _assigned_by(facts: Facts, call: cst.Call) -> set[str]:
    assign = facts.parents.get(call)
    return assigned_names(assign) if isinstance(assign, cst.Assign) else set()


def _report_setting(edits: Edits, node: cst.CSTNode, read: set[str], where: str) -> None:
    edits.report("DDP408", node, (
        f"a training setting chosen from this rank's own losses differs per rank: `{', '.join(sorted(read))}` "
        f"(handed to `{where}`) is picked from this rank's batches; all_reduce the figures it is "
        f"picked from, or pick on rank 0 and dist.broadcast it"))


_SWEEP = """\
rates = [0.01, 0.03, 0.1]
batches = iter(loader)
{loop}
    x, yb = next(batches)
    for group in optimizer.param_groups:
        group["lr"] = rate
    loss = torch.nn.functional.mse_loss(model(x.to(device)), yb.to(device))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


_FINDER = """\
import torch
from torch.utils.data import DataLoader, TensorDataset


class Finder:
    def __init__(self):
        self.model = torch.nn.Linear(4, 1).to("cuda" if torch.cuda.is_available() else "cpu")
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8)
        self.lr = 0.1

    def search(self):
        best = 1e9
        for lr, (x, y) in zip([0.01, 0.1, 1.0], self.loader):
            loss = torch.nn.functional.mse_loss(self.model(x), y)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            {pick}

    def apply(self):
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr


finder = Finder()
finder.search()
finder.apply()
"""


# Draws from a process-wide generator that every rank seeds on its own (or never).
GLOBAL_DRAWS = frozenset(
    {f"random.{name}" for name in ("random", "choice", "choices", "randint", "randrange", "uniform", "sample",
                                   "gauss", "normalvariate", "lognormvariate", "betavariate")}
    | {f"numpy.random.{name}" for name in ("random", "rand", "randn", "randint", "choice", "uniform",
                                           "normal", "random_sample", "lognormal")})
_TRAINING_SETTING = re.compile(r"epoch|iter|step|(^|_)lr($|_)|learning_rate|decay|warmup|milestone|patience",
                               re.IGNORECASE)
_LENGTH_SETTING = re.compile(r"epoch|iter|(^|_)(num|n|max|total)_?steps?|^steps$|patience", re.IGNORECASE)
_SCHEDULE_SETTING = re.compile(r"(^|_)lr($|_)|learning_rate|decay|warmup|milestone|step_size", re.IGNORECASE)


_RANK_WORD = re.compile(r"rank", re.IGNORECASE)


def _reads_the_rank(facts: Facts, value: cst.BaseExpression, scope: Optional[cst.FunctionDef],
                    hops: int = 1) -> bool:
    """Rule: a value read from the rank (`args.seed + args.local_rank`, `dist.get_rank()`,
    `int(os.environ["RANK"])`): a name, attribute, call or environment key naming a rank, or a
    name of the same scope assigned such a value (`seed = base + rank`, one hop)."""
    words = [*names_within(value), *(string.evaluated_value for string in find_all(value, cst.SimpleString)
                                     if isinstance(string.evaluated_value, str))]
    if any(_RANK_WORD.search(word.rpartition(".")[2]) for word in words):
        return True
    if hops == 0:
        return False
    read = set(names_in(value))
    return any(facts.function_of(assign) is scope and assign.value is not None
               and read & assigned_names(assign)
               and _reads_the_rank(facts, assign.value, scope, hops - 1)
               for assign in facts.nodes_of(cst.Assign))


def seeded_per_rank(facts: Facts, seed: cst.Call, draw: cst.Call) -> Optional[cst.Call]:
    """Rule: the seed that runs before the draw reads the rank (`random.seed(args.seed + rank)`,
    or a helper's parameter that its call above the draw hands such a value, `set_seed(42 +
    rank)`): each rank's generator starts from its own seed, so what it draws differs per rank,
    as an unseeded draw does. Returns the call that hands the generator the rank's seed."""
    where = facts.function_of(seed)
    if not seed.args:
        return None
    if _reads_the_rank(facts, seed.args[0].value, where):
        return seed
    if where is None or where is facts.function_of(draw):
        return None
    parameters = {parameter.name.value for parameter in where.params.params}
    if not parameters & set(names_in(seed.args[0].value)):
        return None
    scope = facts.function_of(draw)
    return next((call for call in facts.calls_of(where)
                 if facts.function_of(call) is scope and facts.start_of(call) < facts.start_of(draw)
                 and any(_reads_the_rank(facts, argument.value, scope) for argument in call.args)), None)


def report_settings_drawn_at_random(facts: Facts, edits: Edits) -> None:
    """Rule: a training setting drawn from the global generator of `random` or `numpy.random`
    that nothing seeded above the draw (`num_epochs = random.choice([100, 150])`, `lr =
    random.random() * 5e-4`, `decay_epoch = random.randint(...)`, a random search run once
    per launch) is drawn on each rank on its own: each rank gets its own value. A setting is
    a name assigned from the draw (a plain name or an attribute, `config.num_epochs`) that
    says it is one (epoch, iteration, step, lr, learning rate, decay, warmup, milestone,
    patience), or one a `for` loop's `range(...)` reads. One that sets the training's length
    (an epoch, iteration or step count, or a loop bound; not a decay epoch, a warmup or a
    step size) is reported DDP902: the ranks run
    different numbers of steps, and the first to finish leaves the others waiting in an
    all-reduce (a hang). Another (a rate, a decay) is reported DDP408: the replicas step with
    different settings and drift apart. Never rewritten: the fix is to seed the generator
    alike on every rank before the draw, or to broadcast rank 0's value."""
    if not (facts.training_calls or facts.training_helper_calls or facts.models):
        return
    seeds = {"random": seeding.seed_calls(facts, "random"), "numpy.random": seeding.seed_calls(facts, "numpy")}
    bounds = {name for loop in facts.nodes_of(cst.For) if isinstance(loop.iter, cst.Call)
              and dotted_name(loop.iter.func) == "range" for name in names_within(loop.iter)}
    reported: set[Statement] = set()
    for qualified in sorted(GLOBAL_DRAWS):
        generator = qualified.rpartition(".")[0]
        for draw in facts.calls_named.get(qualified, ()):
            seeded = [seed for seed in seeds[generator] if seeding.seeded_before(facts, seed, draw)]
            per_rank = [call for call in (seeded_per_rank(facts, seed, draw) for seed in seeded) if call is not None]
            if len(per_rank) < len(seeded) \
                    or any(loop in facts.training_loops for loop in facts.enclosing_loops(draw)):
                continue  # (seeded alike; or a draw per batch or epoch, data randomness, not a setting)
            statement = facts.statement_of(draw)
            assign = facts.parents.get(draw)
            while assign is not None and not isinstance(assign, (cst.Assign, cst.AnnAssign, cst.BaseSmallStatement,
                                                                   cst.BaseCompoundStatement)):
                assign = facts.parents.get(assign)
            if not isinstance(assign, (cst.Assign, cst.AnnAssign)) or statement in reported:
                continue
            targets = [target.target for target in assign.targets] if isinstance(assign, cst.Assign) \
                else [assign.target]
            named = [name for name in (dotted_name(target) for target in targets) if name is not None]
            settings = [name for name in named if _TRAINING_SETTING.search(name.rpartition(".")[2])
                        or name in bounds]
            if not settings:
                continue
            reported.add(statement)
            setting = settings[0]
            source = (f"from a generator seeded per rank (`{edits.code(per_rank[-1])}`)" if per_rank
                      else "from the unseeded global generator")
            where = f"`{setting}` is drawn by `{edits.code(draw.func)}()` {source}"
            fix = (f"seed `{generator}` with the same value on every rank before the draw "
                   f"(`{edits.code(draw.func).rpartition('.')[0] or generator}.seed(0)`), or draw on rank 0 and "
                   "broadcast the value (`dist.broadcast_object_list`)")
            last = setting.rpartition(".")[2]
            if setting in bounds or _LENGTH_SETTING.search(last) and not _SCHEDULE_SETTING.search(last):
                edits.report("DDP902", assign, (
                    f"{where}, on each rank on its own: "
                    "each rank gets its own value, runs its own number of epochs or steps, and the first to "
                    f"finish leaves the others waiting in an all-reduce (a hang); {fix}"))
            else:
                edits.report("DDP408", assign, (
                    f"{where}, on each rank on its own: "
                    f"each rank trains with its own value and the replicas drift apart; {fix}"))


def plan(facts: Facts, edits: Edits, setup: Plan) -> None:
    report_dynamic_imports(facts, edits)
    report_settings_drawn_at_random(facts, edits)
    report_skipped_steps(facts, edits, setup)
    report_settings_chosen_per_rank(facts, edits, setup)
    report_per_sample_state(facts, edits)
    reported: set[cst.If] = set()
    clock_reads = {call for qualified in CLOCKS for call in facts.calls_named.get(qualified, ())}
    for loop in training.batch_loops(facts):
        rank_local = rank_local_in(facts, setup, loop)
        _report_stops_on_returned(facts, edits, setup, loop, rank_local, reported)
        candidates = find_all(loop.body, cst.If, into_functions=False)
        after = _after_batch_loop(facts, setup, loop, rank_local, clock_reads)
        candidates.extend(after.ifs)
        rank_local |= after.rank_local
        clock_names, per_epoch = after.clock_names, after.per_epoch
        for node in candidates:
            local = set(names_in(node.test) & rank_local)
            on_clock = _reads(node.test, clock_reads) or bool(local & clock_names)
            skips = not _leaves_loop(node) and _skips_a_step(facts, node, loop)
            if skips:
                # (A skip on a counter every rank shares, `if step < warmup: continue`, is none.)
                local = {name for name in local if not training.same_on_every_rank(facts, loop, name)
                         and not training.read_for_its_size_only(node.test, name)}
            if node in reported or not (_leaves_loop(node) or skips) or not (local or on_clock):
                continue
            if any(value is node.test or facts.ancestor_in(value, node.test) is not None
                   for value in setup.rank0_values):
                continue  # decided on rank 0's figure (rank0_values.py, DDP419)
            reported.add(node)
            if node in per_epoch and local <= clock_names and training.agree_on_clock_stop(facts, edits, setup, node):
                continue  # once per epoch, rank 0's clock decides for every rank
            if local - clock_names:
                updated = _assigned_attributes([loop, *facts.enclosing_loops(loop)[:1]])
                named = _attributes_named(node.test, local - clock_names, updated)
                why = f"`{', '.join(sorted(named))}` differs per rank"
            else:
                why = ("each rank reads its own clock; check the budget once per epoch, after the batch "
                       "loop, where rank 0 decides for every rank")
            edits.report("DDP902", node, f"rank-divergent control flow may hang a collective: {why}")


def _assigned_attributes(loops: list[cst.For]) -> set[str]:
    """`self.k` for `self.k = ...` (or `+=`, or in a tuple) in these loops' bodies: the batch
    loop and the epoch loop around it."""
    found: set[str] = set()
    targets = [target for loop in loops for target in targets_bound_in(loop.body)]
    while targets:
        target = targets.pop()
        if isinstance(target, (cst.Tuple, cst.List)):
            targets.extend(element.value for element in target.elements)
        elif isinstance(target, cst.Attribute) and dotted_name(target) is not None:
            found.add(cast(str, dotted_name(target)))
    return found


def _attributes_named(test: cst.BaseExpression, local: set[str], attributes: set[str]) -> set[str]:
    """What a message names for the rank-local names a test reads: the attribute the loop
    updates (`self.k`, the balance a BEGAN trainer keeps) rather than the object that holds
    it (`self`), which an assignment to an attribute makes rank-local as a whole."""
    read = set(names_within(test))
    named: set[str] = set()
    for name in local:
        held = {attribute for attribute in read & attributes if attribute.startswith(name + ".")}
        named |= held or {name}
    return named


def rank_local_in(facts: Facts, setup: Plan, loop: cst.For) -> set[str]:
    """Names the batch loop binds from this rank's own batches. A step counter (`global_step
    += 1`) counts the same batches on every rank: each rank's sampler hands it the same number
    of them; the epoch sums training.py all-reduces are the same on every rank too."""
    rank_local = assigned_names(loop.body) - step_counters(loop.body)
    rank_local -= _alike_on_every_rank(facts, setup, loop, rank_local)
    rank_local |= _fed_rank_local(loop.body, rank_local, imported_modules(facts))
    if loop in setup.reduced_epoch_loops:
        rank_local -= set(training.epoch_accumulators(facts, loop)) | set(training.epoch_lists(facts, loop))
        rank_local -= setup.reduced_meters.get(loop, set())
    return rank_local


def _alike_on_every_rank(facts: Facts, setup: Plan, loop: cst.For, assigned: set[str]) -> set[str]:
    """Rule: a name the batch loop assigns is rank-local when its value comes from this rank's
    batches, not merely because the loop assigns it. A validation every few steps inside the
    batch loop (`if step % 30 == 0: val_loss = sum(... for xv, yv in val_loader) / n`, or a
    loop over it), over a loader every rank evaluates whole, with the model every rank shares,
    gives the same figure on every rank, and so do the patience counter and the stop flag
    decided on it (`best, bad = val_loss, 0`, `bad += 1`, `stop = True`): the ranks stop
    together. Only names bound by plain assignments (`x = ...`, `x += ...`, tuples of names)
    are weighed; what flows from the loop's targets, from a loop over what is not shared
    (_SharedPasses), from a draw, the clock, `next()` or `iter()`, and from objects the loop
    feeds (_fed_rank_local) stays rank-local, and names bound any other way (an attribute, an
    item, an `as` clause, a nested function) stay rank-local as before."""
    shared = _SharedPasses.of(setup)
    shared_targets = {name for inner in find_all(loop.body, cst.For, into_functions=False)
                      if shared.over_shared(inner, set()) for name in names_in(inner.target)}
    plain = _plainly_assigned(loop.body, shared_targets)
    candidates = assigned & plain
    if not candidates:
        return set()
    # A loader that is not evaluated whole on every rank (the training loader) is this rank's share.
    shares = {name for loader in facts.loaders if loader.name not in shared.whole_loaders
              for name in {loader.name} | {held for _, held in facts.loader_holders_of(loader)}}
    local = (assigned - candidates) | _batch_names(loop) | _drawn_per_rank(facts, loop.body) | shares
    modules = imported_modules(facts)
    for _ in range(3):  # what one round makes rank-local may feed an earlier statement next batch
        _spread_rank_local(loop.body, local, False)
        local |= _fed_rank_local(loop.body, local, modules)
    return candidates - local


def _batch_names(loop: cst.For) -> set[str]:
    """The names the batch loop binds to this rank's batch: its target, but the index of an
    `enumerate(loader)` (`for i, (x, y) in enumerate(loader)`), which counts the same batches
    on every rank, each rank's sampler handing it as many."""
    target = loop.target
    counted = isinstance(loop.iter, cst.Call) and dotted_name(loop.iter.func) == "enumerate" \
        and isinstance(target, cst.Tuple) and bool(target.elements) and isinstance(target.elements[0].value, cst.Name)
    if counted:
        assert isinstance(target, cst.Tuple)
        return set().union(*(names_in(element.value) for element in target.elements[1:]))
    return set(names_in(target))


def _plainly_assigned(body: cst.CSTNode, shared_targets: set[str]) -> set[str]:
    """Names every binding of which in `body` is a plain assignment to a name (or a tuple of
    names), or the target of a loop over what every rank shares (`shared_targets`)."""
    plain: set[str] = set()
    other: set[str] = set()
    for node in within(body):
        if isinstance(node, cst.FunctionDef):
            other |= assigned_names(node)
        elif isinstance(node, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign)):
            target = node.target
            elements = _flattened([target])
            if all(isinstance(element, cst.Name) for element in elements):
                plain |= {cast(cst.Name, element).value for element in elements}
            else:
                other |= names_in(target)
        elif isinstance(node, cst.For):
            bound = set(names_in(node.target))
            (plain if bound <= shared_targets else other).update(bound)
        elif isinstance(node, (cst.AsName, cst.NamedExpr)):
            other |= names_in(node.name if isinstance(node, cst.AsName) else node.target)
    return plain - other


# Calls whose value differs from rank to rank whatever they are handed: the next batch of an
# iterator (over a sharded loader), the clock, the process, the memory this rank's device holds.
_PER_RANK_CALLS = frozenset({"next", "iter"})
_PER_RANK_PREFIXES = ("torch.cuda.", "numpy.random.", "random.", "torch.rand")


def _drawn_per_rank(facts: Facts, body: cst.CSTNode) -> set[str]:
    """Names a plain assignment in `body` binds from a call whose value differs per rank."""
    qualified = seeding.qualified_names(facts)
    found: set[str] = set()
    for node in within(body):
        if not isinstance(node, (cst.Assign, cst.AugAssign, cst.AnnAssign)) or node.value is None:
            continue
        for call in calls_within(node.value):
            callee = seeding.callee_of(call, qualified)
            if callee in _PER_RANK_CALLS or callee in seeding.PER_PROCESS or callee in GLOBAL_DRAWS \
                    or callee.startswith(_PER_RANK_PREFIXES):
                found |= _bound_by(node)
                break
    return found


def _fed_rank_local(body: cst.CSTNode, rank_local: set[str], modules: Collection[str] = ()) -> set[str]:
    """Objects the batch loop feeds this rank's values through a method call
    (`losses.update(loss.item(), x.size(0))`, `history.append(loss.item())`): what they hold
    afterwards (`losses.avg`, `history[-1]`) comes from this rank's batches only, as a name
    the loop assigns does. Only a call made for its effect (a statement of its own) on a plain
    name feeds: `self.model(x)` or `x.to(device)` computes a value and changes nothing. A
    function of an imported module (`wandb.log({"loss": loss})`, `mlflow.log_metric(...)`) is
    no object the loop fills: `wandb.config`, read for the learning rate, stays shared."""
    excluded = {"self", "cls", *modules}
    return {receiver for receiver, read in _feeding_calls(body)
            if receiver not in excluded and any(names & rank_local for names in read)}


@memo.per_migration
def _feeding_calls(body: cst.CSTNode) -> tuple[tuple[str, tuple[frozenset[str], ...]], ...]:
    """The method calls made for their effect in `body` on a plain name, each with the names
    each of its arguments reads: what _fed_rank_local tests, once per body however often a
    spread asks (ddpify.analysis.memo)."""
    return tuple(
        (call.func.value.value, tuple(frozenset(names_in(arg.value)) for arg in call.args))
        for expression in find_all(body, cst.Expr, into_functions=False)
        if isinstance(call := expression.value, cst.Call) and isinstance(call.func, cst.Attribute)
        and isinstance(call.func.value, cst.Name))


def _report_stops_on_returned(facts: Facts, edits: Edits, setup: Plan, loop: cst.For, rank_local: set[str],
                              reported: set[cst.If]) -> None:
    """A function whose batch loop trains hands back a per-rank value (`return loss.item()`,
    the last batch's loss; a tuple holding one): where it is called in a loop, a break or
    return decided on that value stops one rank while the others wait in the next
    all-reduce. The names the call's result is assigned to (each element of a tuple to the
    element returned there) are rank-local in the calling loop, and so is the call itself
    read in a test."""
    function = facts.function_of(loop)
    if function is None or not rank_local:
        return
    local_positions = rank_local_positions(facts, function, rank_local)
    if not local_positions:
        return
    for call in facts.calls_of(function):
        callers = facts.enclosing_loops(call)
        if not callers or call in setup.rank0_values:  # rank 0's value on every rank (rank0_values.py)
            continue
        statement = facts.statement_of(call)
        local = names_given(statement, call, local_positions)
        for node in find_all(callers[0].body, cst.If, into_functions=False):
            if node in reported or not _leaves_loop(node):
                continue
            read = names_in(node.test) & local
            if not read and not any(inner is call for inner in calls_within(node.test)):
                continue
            reported.add(node)
            what = f"`{', '.join(sorted(read))}`" if read else f"`{function.name.value}()`"
            edits.report("DDP902", node, (
                f"rank-divergent control flow may hang a collective: {what} differs per rank "
                f"(`{function.name.value}()` returns a value from this rank's own batches)"))


def names_given(statement: Statement, call: cst.Call, positions: set[Optional[int]]) -> set[str]:
    """The names `statement` assigns the rank-local part of what `call` returns, and the object
    a call made for its effect feeds it to (`history.append(train_epoch())`: `history[-1]` then
    holds it)."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return set()
    names: set[str] = set()
    for small in statement.body:
        if isinstance(small, cst.Expr) and isinstance(fed := small.value, cst.Call) \
                and isinstance(fed.func, cst.Attribute) and isinstance(fed.func.value, cst.Name) \
                and any(arg.value is call for arg in fed.args):
            names.add(fed.func.value.value)
        if not isinstance(small, cst.Assign) or small.value is not call:
            continue
        for target in small.targets:
            if isinstance(target.target, (cst.Tuple, cst.List)) and None not in positions:
                names |= {name for index, element in enumerate(target.target.elements)
                          if index in positions for name in names_in(element.value)}
            else:
                names |= assigned_names(target)
    return names


@dataclass
class _AfterBatchLoop:
    """What the epoch loop does after its batch loop."""

    ifs: list[cst.If] = field(default_factory=list)
    # Names set there from a rank-local name (`avg = running / n`) or from the clock.
    rank_local: set[str] = field(default_factory=set)
    # Names set there from the clock (`elapsed = time.time() - start`).
    clock_names: set[str] = field(default_factory=set)
    # Ifs directly in the epoch loop's body: decided once per epoch.
    per_epoch: list[cst.If] = field(default_factory=list)


def _after_batch_loop(facts: Facts, setup: Plan, loop: cst.For, rank_local: set[str],
                      clock_reads: set[cst.Call]) -> _AfterBatchLoop:
    found = _AfterBatchLoop(rank_local=set(rank_local))
    outer = facts.enclosing_loops(loop)
    if not outer:
        return found
    statements = list(outer[0].body.body)
    for statement in statements[statements.index(_child_of(facts, loop, outer[0])) + 1:]:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if not isinstance(small, cst.Assign) or small.value in setup.rank0_values:
                    continue
                if names_in(small.value) & found.rank_local:
                    found.rank_local |= assigned_names(small)
                elif _reads(small.value, clock_reads):
                    found.rank_local |= assigned_names(small)
                    found.clock_names |= assigned_names(small)
        if isinstance(statement, cst.If):
            found.per_epoch.append(statement)
        found.ifs.extend(find_all(statement, cst.If, into_functions=False))
    later = statements[statements.index(_child_of(facts, loop, outer[0])) + 1:]
    shared = _SharedPasses.of(setup)
    for _ in range(2):  # what one pass makes rank-local may feed an earlier statement next epoch
        current = set(found.rank_local)
        for statement in later:
            _spread_in_order([statement], current, shared)
            found.rank_local |= current
    return found


def _spread_rank_local(node: cst.CSTNode, rank_local: set[str], decided_locally: bool,
                       shared: Collection[str] = ()) -> None:
    """Names assigned from a rank-local value (`best = last`, `bad_epochs += last > best`), or
    under a test that reads one (`if last < best: ... else: bad_epochs += 1`), are rank-local
    too: an early stop on a patience counter kept after the batch loop differs per rank."""
    decided = {_NO_TEST: decided_locally}
    kept_shared = set(shared)
    for step in _spread_steps(node):
        if isinstance(step, _TestStep):
            decided[step.test] = decided[step.inside] or bool(step.reads & rank_local)
        elif decided[step.inside] or step.reads is not None and step.reads & rank_local:
            rank_local |= step.assigned - kept_shared


# The `if` tests a spread step sits under, numbered in the order a walk meets them.
_NO_TEST = -1


@dataclass(frozen=True)
class _TestStep:
    """An `if` whose test (reading `reads`) decides its blocks, under test `inside`."""

    test: int
    inside: int
    reads: frozenset[str]


@dataclass(frozen=True)
class _AssignStep:
    """An assignment binding `assigned` from a value reading `reads` (None: no value)."""

    inside: int
    reads: Optional[frozenset[str]]
    assigned: frozenset[str]


@memo.per_migration
def _spread_steps(node: cst.CSTNode) -> tuple[Union[_TestStep, _AssignStep], ...]:
    """The tests and assignments _spread_rank_local weighs, in the order its walk meets them:
    a function body is spread a few rounds per batch loop and per caller, and its tree is
    read once (ddpify.analysis.memo)."""
    steps: list[Union[_TestStep, _AssignStep]] = []

    def walk(node: cst.CSTNode, inside: int) -> None:
        if isinstance(node, cst.If):
            test = len(steps)
            steps.append(_TestStep(test, inside, _reads_of(node.test)))
            for block in (node.body, node.orelse):
                if block is not None:
                    walk(block, test)
        elif isinstance(node, (cst.Assign, cst.AugAssign, cst.AnnAssign)):
            value = node.value
            steps.append(_AssignStep(inside, None if value is None else _reads_of(value),
                                     frozenset(_bound_by(node))))
        elif not isinstance(node, cst.FunctionDef):
            for child in traversal.children(node):
                walk(child, inside)

    walk(node, _NO_TEST)
    return tuple(steps)


def _bound_by(node: cst.CSTNode) -> set[str]:
    """What an assignment makes per-rank when its value is: a name, or an attribute by its
    dotted name (`model.seen += imgs.size(0)` makes `model.seen` per-rank, not `model`, whose
    settings `model.hyperparams["lr"]` every rank shares); an item, the whole container."""
    bound: set[str] = set()
    for target in targets_bound_in(node):
        name = dotted_name(target) if isinstance(target, cst.Attribute) else None
        bound |= {name} if name is not None else names_in(target)
    return bound


def _reads_of(node: cst.CSTNode) -> frozenset[str]:
    """Every name _read_in can find in `node`, whatever is per-rank."""
    return frozenset(names_in(node)) | {name for attribute in find_all(node, cst.Attribute, into_functions=False)
                                        if (name := dotted_name(attribute)) is not None}


def _spread_in_order(statements: Sequence[cst.CSTNode], current: set[str],
                     shared: "_SharedPasses") -> None:
    """_spread_rank_local over statements that run one after the other (the epoch loop's body
    after its batch loop, a `with` block's), where `current` holds what is rank-local at each
    point: a plain assignment from values no rank-local name feeds rebinds its names to what
    every rank shares (`val_loss = 0.0`, `X, y = X.to(device), y.to(device)` after they were
    rebound), and so does a loop over what every rank shares (_spread_in_shared_loop). Inside
    an `if`, which may not run, names are only added."""
    for statement in statements:
        if isinstance(statement, cst.With):
            _spread_in_order(statement.body.body, current, shared)
        elif isinstance(statement, cst.For) and shared.over_shared(statement, current):
            after = _spread_in_shared_loop(statement, current, shared)
            current.clear()
            current |= after
        elif isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.Assign) and (not _read_in(small.value, current)
                                                      or small.value in shared.rank0_values):
                    current -= _plain_names_bound(small)
                else:
                    _spread_rank_local(small, current, False)
        else:
            _spread_rank_local(statement, current, False)


@dataclass
class _SharedPasses:
    """The passes over evaluation data whose figures are the same on every rank after them:
    those evaluation.py gathers (DDP216), and those over an evaluation loader it leaves whole
    (no sampler: every rank evaluates the same batches). A pass over a loader given a sampler
    (the training loader, to measure its accuracy) stays this rank's own."""

    gathered: set[cst.For]
    whole_loaders: set[str]
    # Values that hold rank 0's value (rank0_values.py): what is assigned them is shared.
    rank0_values: set[cst.BaseExpression] = field(default_factory=set)

    @staticmethod
    def of(setup: Plan) -> "_SharedPasses":
        sharded = {loader.name for loader in setup.loaders_given_a_sampler}
        whole = {loader.name for loader in setup.evaluation_loaders} - sharded
        return _SharedPasses(set(setup.gathered_evaluations), whole, setup.rank0_values)

    def over_shared(self, loop: cst.For, current: set[str]) -> bool:
        if _read_in(loop.iter, current):
            return False
        return loop in self.gathered or bool(names_in(loop.iter) & self.whole_loaders)


def _spread_in_shared_loop(loop: cst.For, current: set[str], shared: _SharedPasses) -> set[str]:
    """What is rank-local after a pass over what every rank shares (_SharedPasses): its target
    holds the same on every rank (`for X, y in val_loader` after `for X, y in train_loader`),
    and so does what its body computes from it in order (`out = model(X)`, `loss =
    criterion(out, y)`). The loop is taken to run at least once (an evaluation loader is not
    empty): the state after one batch, joined with that after later ones."""
    target = set(names_in(loop.target))
    after: set[str] = set()
    inner = set(current)
    for _ in range(2):  # the first batch, then the later ones
        inner -= target
        _spread_in_order(loop.body.body, inner, shared)
        after |= inner
    return after


def _plain_names_bound(assign: cst.Assign) -> set[str]:
    """The names an assignment rebinds as a whole (`out = ...`, `x, y = ...`); a target
    `self.k` or `bank[i]` changes part of an object and rebinds nothing."""
    return {element.value for element in _flattened([target.target for target in assign.targets])
            if isinstance(element, cst.Name)}


def _reads(node: cst.CSTNode, calls: set[cst.Call]) -> bool:
    return any(call in calls for call in calls_within(node))


def step_counters(body: cst.CSTNode) -> set[str]:
    """Names every assignment of which in `body` adds a number literal (`step += 1`)."""
    counted: set[str] = set()
    other: set[str] = set()
    for node in within(body):
        if isinstance(node, cst.AugAssign):
            name = node.target.value if isinstance(node.target, cst.Name) else None
            if name is None:
                continue
            if isinstance(node.operator, cst.AddAssign) and isinstance(node.value, (cst.Integer, cst.Float)):
                counted.add(name)
            else:
                other.add(name)
        elif isinstance(node, cst.AssignTarget):
            other.update(names_in(node.target))
    return counted - other


def _child_of(facts: Facts, node: cst.CSTNode, loop: cst.For) -> BlockItem:
    child = facts.ancestor_in(node, loop.body)
    assert child is not None  # node is one of the loops inside this loop's body
    return child




def _skips_a_step(facts: Facts, statement: cst.If, loop: cst.For) -> bool:
    """A `continue` of the batch loop among the statements of the if's own body, with a
    backward or an optimizer step after the if in that loop (`if torch.isnan(loss):
    continue` before `loss.backward()`): the rank that skips leaves the others waiting in
    the step's all-reduce. A `continue` after the step (skipping a log line) skips none."""
    continues = any(isinstance(inner, cst.SimpleStatementLine) and any(
        isinstance(small, cst.Continue) for small in inner.body) for inner in statement.body.body)
    if not continues or facts.enclosing_loops(statement)[:1] != [loop]:
        return False
    end = facts.end_of(statement)
    return any(loop in facts.enclosing_loops(call) and facts.start_of(call) > end for call in facts.training_calls)


def _leaves_loop(statement: cst.If) -> bool:
    """A break or return among the statements of the if's own body."""
    for inner in statement.body.body:
        if isinstance(inner, cst.SimpleStatementLine) and any(
            isinstance(small, (cst.Break, cst.Return)) for small in inner.body
        ):
            return True
    return False


EPOCH_FUNCTION = TRAINING.replace("for epoch in range(3):\n", """\
def train_epoch():
    total = 0.0
""").replace("        optimizer.step()\n", """\
        optimizer.step()
        total += loss.item()
    return {returned}


for epoch in range(3):
    last = train_epoch()
    if last < 0.01:
        break
""").replace("    print(epoch, loss.item())\n", "")

_PATIENCE = """\
    last = {value}
    if last < best:
        best, bad = last, 0
    else:
        bad += 1
    if bad >= 2:
        break
"""

# The same, with the figure read in the tests themselves: no point holds it once per epoch
# (a figure assigned there, `last = loss.item()`, takes rank 0's value: rank0_values.py).
_PATIENCE_READ_IN_TESTS = """\
    if {value} < best:
        best, bad = {value}, 0
    else:
        bad += 1
    if bad >= 2:
        break
"""

_VALIDATION = """\
    with torch.no_grad():
        for x, y in {loader}:
            {name} = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
"""
_PATIENT = "val_loader = DataLoader(dataset, batch_size=16)\nbest, bad = 1e9, 0\nfor epoch in range(3):\n"

STEP_VALIDATION = TRAINING.replace("loader = DataLoader(dataset, batch_size=8, shuffle=True)\n", (
    "loader = DataLoader(dataset, batch_size=8, shuffle=True)\n"
    "val_loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=8)\n"
    "best, bad, step = float('inf'), 0, 0\n")).replace("        optimizer.step()\n", (
        "        optimizer.step()\n        step += 1\n        if step % 4 == 0:\n"
        "            val = sum(float(torch.nn.functional.mse_loss(model(a), b)) for a, b in val_loader)\n"
        "            if val < best:\n                best, bad = val, 0\n            else:\n                bad += 1\n"
        "            if bad > 2:\n                break\n"))
CASES = (
    Emits(TRAINING.replace("import torch\n", "import random\n\nimport torch\n", 1)
          .replace("for epoch in range(3):", "num_epochs = random.choice([3, 4])\nfor epoch in range(num_epochs):"),
          "DDP902"),
    Emits(TRAINING.replace("import torch\n", "import random\n\nimport torch\n", 1)
          .replace("lr=0.1)", "lr=lr)").replace("device = ", "lr = random.uniform(0.01, 0.1)\ndevice = ", 1),
          "DDP408"),
    Silent(TRAINING.replace("import torch\n", "import random\n\nimport torch\n", 1)
           .replace("for epoch in range(3):", "random.seed(0)\nnum_epochs = random.choice([3, 4])\n"
                    "for epoch in range(num_epochs):"), "DDP902"),
    # A seed offset by the rank is no seed alike: each rank draws its own count.
    Emits(TRAINING.replace("import torch\n", "import os\nimport random\n\nimport torch\n", 1)
          .replace("for epoch in range(3):", "random.seed(1 + int(os.environ.get('LOCAL_RANK', 0)))\n"
                   "num_epochs = random.choice([3, 4])\nfor epoch in range(num_epochs):"), "DDP902"),
    Emits(TRAINING.replace("        optimizer.step()\n",
                           "        optimizer.step()\n        if loss.item() < 0.01:\n            break\n"),
          "DDP902"),
    Silent(TRAINING, "DDP902"),
    # A batch skipped on this rank's loss before its backward: the other ranks wait in the
    # all-reduce. A skip after the step leaves no collective behind.
    Emits(TRAINING.replace("        optimizer.zero_grad()\n",
                           "        if torch.isnan(loss):\n            continue\n        optimizer.zero_grad()\n"),
          "DDP902"),
    Silent(TRAINING.replace("        optimizer.step()\n",
                            "        optimizer.step()\n        if loss.item() > 1.0:\n            continue\n"
                            "        print(loss.item())\n"), "DDP902"),
    # A patience counter kept after the batch loop, counted under a test on the last batch's
    # loss: per rank. The same on the epoch's mean, which training.py all-reduces, is not.
    Emits(TRAINING.replace("for epoch in range(3):\n", "best, bad = 1e9, 0\nfor epoch in range(3):\n")
          .replace("    print(epoch, loss.item())\n", _PATIENCE_READ_IN_TESTS.format(value="loss.item()")), "DDP902"),
    Silent(TRAINING.replace("for epoch in range(3):\n", "best, bad = 1e9, 0\nfor epoch in range(3):\n    total = 0.0\n")
           .replace("        optimizer.step()\n", "        optimizer.step()\n        total += loss.item()\n")
           .replace("    print(epoch, loss.item())\n", _PATIENCE.format(value="total / len(loader)")), "DDP902"),
    # A validation loop that rebinds the batch loop's names (`x`, `y`, `loss`) from the
    # evaluation loader: every rank then holds the same `loss` (the loader is evaluated whole,
    # or sharded with what is read after it gathered). One that leaves `loss` alone does not,
    # nor one over the training loader, which each rank goes through its share of.
    Silent(TRAINING.replace("for epoch in range(3):\n", _PATIENT)
           .replace("    print(epoch, loss.item())\n", _VALIDATION.format(loader="val_loader", name="loss")
                    + _PATIENCE.format(value="loss.item()")), "DDP902"),
    Emits(TRAINING.replace("for epoch in range(3):\n", _PATIENT)
          .replace("    print(epoch, loss.item())\n", _VALIDATION.format(loader="val_loader", name="val")
                   + _PATIENCE_READ_IN_TESTS.format(value="loss.item()")), "DDP902"),
    Emits(TRAINING.replace("for epoch in range(3):\n", _PATIENT)
          .replace("    print(epoch, loss.item())\n", _VALIDATION.format(loader="loader", name="loss")
                   + _PATIENCE_READ_IN_TESTS.format(value="loss.item()")), "DDP902"),
    # The epoch in a function: a stop on the last batch's loss it returns is per rank (it takes
    # rank 0's value where it is assigned, rank0_values.py); one on the epoch's mean, which
    # training.py all-reduces, is the same on every rank.
    Silent(EPOCH_FUNCTION.format(returned="total / len(loader)"), "DDP902"),
    # A meter the batch loop feeds this rank's losses: its average is this rank's own.
    Emits(TRAINING.replace("for epoch in range(3):\n", "for epoch in range(3):\n    meter = Meter()\n")
          .replace("        optimizer.step()\n", "        optimizer.step()\n        meter.update(loss.item())\n")
          .replace("    print(epoch, loss.item())\n", "    if meter.avg < 0.01:\n        break\n"),
          "DDP902"),
    # A time budget checked at every step: each rank reads its own clock.
    Emits(TRAINING.replace("import torch\n", "import time\n\nimport torch\n", 1)
          .replace("for epoch in range(3):\n", "start = time.time()\nfor epoch in range(3):\n")
          .replace("        optimizer.step()\n",
                   "        optimizer.step()\n        if time.time() - start > 3600:\n            break\n"),
          "DDP902"),
    # A tensor kept across batches written at the batch's own indices: each rank's copy drifts.
    Emits(TRAINING.replace("TensorDataset(torch.randn(64, 4), torch.randn(64, 1))",
                           "TensorDataset(torch.randn(64, 4), torch.randn(64, 1), torch.arange(64))")
          .replace("for x, y in loader:", "for x, y, idx in loader:")
          .replace("        optimizer.step()\n", "        optimizer.step()\n        bank[idx] = loss.detach()\n"),
          "DDP406"),
    # Written into the batch itself (a mask of its own targets): nothing outlives the batch.
    Silent(TRAINING.replace("        optimizer.step()\n", "        optimizer.step()\n        y[x > 0] = 0\n"),
           "DDP406"),
    Emits(TRAINING.replace("import torch\n", "import importlib\n\nimport torch\n", 1)
          .replace("device = torch", 'plugins = importlib.import_module("plugins." + NAME)\ndevice = torch', 1),
          "DDP909", ('importlib.import_module("plugins." + NAME)',)),
    # A library chosen by name (`for m in ["torch.utils.tensorboard", "tensorboardX"]`): no
    # module of the project can be missed.
    Silent(TRAINING.replace("import torch\n", "import importlib\n\nimport torch\n", 1)
           .replace("device = torch", 'board = importlib.import_module("tensorboardX")\ndevice = torch', 1),
           "DDP909"),
    Emits(TRAINING.replace("import torch\n", "import sys\n\nimport torch\n", 1)
          .replace("device = torch", 'sys.path.insert(0, "../lib")\ndevice = torch', 1), "DDP909"),
    # No training in sight, but the modules it hands its model and loader to come through a
    # sys.path entry ddpify does not follow (`python tools/train.py` from the repository root):
    # not "no training code" (exit 0), the training may be there.
    Emits("import sys\n\nimport torch\n\nsys.path.append('.')\nfrom engine.trainer import do_train\n\n"
          "model = torch.nn.Linear(4, 1)\ndo_train(model, torch.utils.data.DataLoader(range(8)))\n",
          "DDP909", ("sys.path.append('.')",)),
    # A package's __init__.py that loads its agents from its folder names no torch: still read.
    Emits("import os\n\nfor name in os.listdir(os.path.dirname(__file__)):\n"
          "    __import__(__name__ + '.' + name[:-3])\n", "DDP909", ("__import__(__name__ + '.' + name[:-3])",)),
    Silent("import os\n\nplugin = __import__('json')\nprint(os.getcwd(), plugin)\n", "DDP909"),
    Silent(TRAINING, "DDP909"),
    # A learning rate picked by this rank's last batch loss, then handed to a new optimizer:
    # per rank. A decay on the epoch count alone is the same everywhere.
    Emits(TRAINING.replace("for epoch in range(3):\n", "best_loss, best_lr = 1e9, 0.1\nfor epoch in range(3):\n")
          .replace("    print(epoch, loss.item())\n", "    if loss.item() < best_loss:\n"
                   "        best_loss, best_lr = loss.item(), 0.1 / (epoch + 1)\n"
                   "optimizer = torch.optim.SGD(model.parameters(), lr=best_lr)\n"), "DDP408"),
    Silent(TRAINING.replace("    print(epoch, loss.item())\n", "    for group in optimizer.param_groups:\n"
                            "        group[\"lr\"] = 0.1 * 0.5 ** epoch\n"), "DDP408"),
    # Kept on the object by the method that picks it, read as a setting by another method.
    Emits(_FINDER.format(pick="if loss.item() < best:\n                best, self.lr = loss.item(), lr"), "DDP408",
          ('group["lr"] = self.lr',)),
    Silent(_FINDER.format(pick="self.lr = 0.05"), "DDP408"),
    # A sweep over rates the script lists, one batch each drawn by hand: the rate is the
    # loop's own value, the same on every rank; the batch drawn is per rank, the rate is not.
    Silent(TRAINING + _SWEEP.format(loop="for rate in [0.01, 0.03, 0.1]:"), "DDP408"),
    Silent(TRAINING + _SWEEP.format(loop="for step, rate in enumerate(rates):"), "DDP408"),
    Emits(TRAINING + _SWEEP.format(loop="for rate in [0.01, 0.03, 0.1]:").replace(
        '        group["lr"] = rate\n', '        group["lr"] = rate * float(yb.mean())\n'), "DDP408"),
    # A plateau scheduler stepped on the last batch's loss: stepped on the ranks' mean. On
    # the epoch's mean, which training.py all-reduces, it is left as it is.
    Emits(TRAINING.replace("for epoch in range(3):\n", "scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau("
                           "optimizer)\nfor epoch in range(3):\n")
          .replace("    print(epoch, loss.item())\n", "    scheduler.step(loss.item())\n"), "DDP409",
          ("scheduler.step(mean_over_ranks(loss.item()))",)),
    Silent(TRAINING.replace("for epoch in range(3):\n", "scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau("
                            "optimizer)\nfor epoch in range(3):\n    total = 0.0\n")
           .replace("        optimizer.step()\n", "        optimizer.step()\n        total += loss.item()\n")
           .replace("    print(epoch, loss.item())\n", "    scheduler.step(total / len(loader))\n"), "DDP409"),
    # A step inside try: a handler that goes on skips this rank's backward; one for Ctrl-C
    # (every rank gets the signal) does not.
    Emits(TRAINING.replace("        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()\n",
                           "        try:\n            loss.backward()\n            optimizer.step()\n"
                           "        except Exception:\n            pass\n"), "DDP902"),
    Silent(TRAINING.replace("        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()\n",
                            "        try:\n            loss.backward()\n            optimizer.step()\n"
                            "        except KeyboardInterrupt:\n            break\n"), "DDP902"),
    # A validation every few steps inside the batch loop, over a loader every rank evaluates
    # whole, stops every rank together; over the training loader (this rank's share) it does not.
    Silent(STEP_VALIDATION, "DDP902"),
    Emits(STEP_VALIDATION.replace("in val_loader)", "in loader)"), "DDP902"),
)
