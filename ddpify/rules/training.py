"""The training loop: no_sync() on accumulation micro-batches, epoch figures summed across
ranks, a stop on the clock decided alike on every rank, a plateau scheduler stepped on the
ranks' mean (DDP401, DDP402, DDP404, DDP405, DDP409).

Both keep the run as a group of one exactly as it was: no_sync() only when distributed, and
the all-reduce only when distributed. Neither adds work per step: the all-reduce runs once per
epoch on the sums the script already keeps.
"""
from collections.abc import Iterable
from typing import Callable, Optional, cast

import libcst as cst

from ddpify.analysis import meters, traversal
from ddpify.analysis.bindings import names_read_after
from ddpify.analysis.control import Facts
from ddpify.analysis.facts import Statement
from ddpify.analysis.nodes import (
    argument_for,
    assigned_names,
    calls_within,
    dotted_name,
    find_all,
    handed_for,
    made_one_each,
    names_in,
    parameter_names,
    statements_in,
    string_value,
)
from ddpify.diagnostics import Rule, Severity
from ddpify.emit import collectives, fsdp2
from ddpify.emit.edits import Edits, Insertion
from ddpify.emit.layout import fits
from ddpify.plan import Plan
from ddpify.rules.cases import TRAINING, Emits, Silent

RULES = (
    Rule("DDP401", Severity.EDIT, "gradient accumulation skips the all-reduce on micro-batches",
         "Without no_sync() DDP all-reduces gradients on every micro-batch, not only before "
         "the optimizer step.",
         "Nothing to do."),
    Rule("DDP402", Severity.EDIT, "epoch figures summed across ranks before they are used",
         "Each rank trains on its own shard, so its running loss and counts cover 1/N of the "
         "epoch; one all-reduce per epoch gives the figures the original printed.",
         "Nothing to do."),
    Rule("DDP405", Severity.EDIT, "a stop on the clock decided by rank 0 for every rank",
         "Each rank reads its own clock: near a time budget one rank would stop while the others "
         "start the next epoch and wait in its first all-reduce. One broadcast per epoch makes "
         "every rank stop with rank 0.",
         "Nothing to do."),
    Rule("DDP409", Severity.EDIT, "a plateau scheduler steps on the mean of the ranks' figures",
         "ReduceLROnPlateau lowers the learning rate when the figure it is stepped on stops "
         "improving. Stepped on this rank's own loss, each rank decides on another figure: "
         "their learning rates, and then their weights, drift apart (DDP averages gradients, "
         "not learning rates). One all-reduce where it steps (once per epoch) makes the figure "
         "the same on every rank; as a group of one the figure is passed on unchanged.",
         "Nothing to do."),
    Rule("DDP407", Severity.WARNING, "running figure held by an object ddpify cannot read",
         "A meter filled batch by batch (`meter.update(loss.item(), n)`) and read after the loop "
         "holds this rank's share of the epoch. ddpify sums `sum` and `count` across ranks only "
         "for a class whose update() it reads as a sum and a count (the AverageMeter shape).",
         "After the loop, all-reduce the meter's sum and count and recompute its average, "
         "or give its class the AverageMeter shape."),
    Rule("DDP404", Severity.WARNING, "gradient accumulation not wrapped in no_sync()",
         "ddpify found an optimizer step under a condition but could not tell which forward "
         "and backward passes belong to the micro-batches, so every micro-batch all-reduces.",
         "Wrap forward and backward of the micro-batches that do not step in `model.no_sync()`."),
)

NO_SYNC_COMMENT = "# DDP all-reduces gradients only on the micro-batch that steps the optimizer."
NO_SYNC_CONTEXT = "contextlib.nullcontext() if {sync} or not {distributed} else {model}.no_sync()"
STOP_ON_CLOCK_CODE = """\
{flag} = {test}
if distributed:
    # Each rank reads its own clock: rank 0's decision holds on every rank.
    {decision} = torch.tensor([int({flag})]{device})
    dist.broadcast({decision}, src=0)
    {flag} = bool({decision})
"""
MEAN_NAME = "mean_over_ranks"
MEAN_HELPER = '''\


def mean_over_ranks(value):
    """The mean of a number over the ranks (the number itself in a group of one): a learning
    rate decided on it is then the same on every rank."""
    if not dist.is_initialized():
        return value
    # Gloo reads the CPU; NCCL (and the other accelerator backends) the rank's own device.
    on_cpu = "gloo" in dist.get_backend()
    device = torch.device("cpu") if on_cpu else torch.accelerator.current_accelerator()
    total = torch.tensor([float(value)], dtype=torch.float64, device=device)
    dist.all_reduce(total)
    return total.item() / dist.get_world_size()
'''
REDUCE_COMMENT = "# Sum the epoch's figures over all ranks, once per epoch, before they are used."
LIST_COMMENT = "# Join every rank's per-batch values, once per epoch, before they are used."


def plan(facts: Facts, edits: Edits, setup: Plan) -> None:
    for loop in batch_loops(facts):
        _no_sync_on_micro_batches(facts, edits, setup, loop)
        _reduce_epoch_figures(facts, edits, setup, loop)


def batch_loops(facts: Facts) -> list[cst.For]:
    """Training loops with no training loop inside them, in source order."""
    inner = [loop for loop in facts.training_loops
             if not any(other is not loop and loop in facts.enclosing_loops(other)
                        for other in facts.training_loops)]
    return sorted(inner, key=facts.line_of)


# --- gradient accumulation -----------------------------------------------------------------------

# Calls whose result is the same on every rank when their arguments are: a sharded loader has
# the same length on every rank (DistributedSampler pads), and arithmetic is arithmetic.
_UNIFORM_CALLS = frozenset({"len", "int", "float", "min", "max", "abs", "round"})


def same_on_every_rank(facts: Facts, loop: cst.For, name: str) -> bool:
    """`batches_done = epoch * len(dataloader) + i`: every value the loop gives `name` is
    computed from step counters (a range loop's variable, an enumerate index), from names the
    loop does not bind (the script's options), and from len(): every rank steps the same
    number of batches, so it holds the same value on every rank."""
    counters: set[str] = set()
    for each in [loop, *facts.enclosing_loops(loop)]:
        target, iterated = each.target, each.iter
        callee = dotted_name(iterated.func) if isinstance(iterated, cst.Call) else None
        if callee == "range" and isinstance(target, cst.Name):
            counters.add(target.value)
        elif callee == "enumerate" and isinstance(target, cst.Tuple) and target.elements \
                and isinstance(target.elements[0].value, cst.Name):
            counters.add(target.elements[0].value.value)
    bound_here = assigned_names(loop.body) | assigned_names(loop.target)
    values = [assign.value for assign in find_all(loop.body, cst.Assign) if any(
        isinstance(target.target, cst.Name) and target.target.value == name for target in assign.targets)]
    augmented = [node for node in find_all(loop.body, cst.AugAssign)
                 if isinstance(node.target, cst.Name) and node.target.value == name]
    if not values and not augmented:
        return False
    if values and not augmented and all(_norm_of_reduced_gradients(facts, loop, value) for value in values):
        return True
    for value in [*values, *(node.value for node in augmented)]:
        if any(dotted_name(call.func) not in _UNIFORM_CALLS for call in calls_within(value)):
            return False
        if any(read in bound_here and read not in counters and read != name for read in names_in(value)):
            return False
    return True


# The total norm of the gradients: clip_grad_norm_ returns it, get_total_norm computes it.
_GRADIENT_NORMS = frozenset({"clip_grad_norm_", "clip_grad_norm", "get_total_norm"})


def _norm_of_reduced_gradients(facts: Facts, loop: cst.For, value: cst.BaseExpression) -> bool:
    """Rule: which values are the same on every rank after the backward. The backward of the
    DDP-wrapped model all-reduces every gradient, so each `.grad` holds the same average on
    every rank; the total norm of those gradients (`clip_grad_norm_(model.parameters(), c)`,
    also through `.item()` or float()) read after a backward of the same batch loop is the
    same on every rank, and so is a test on it (`if torch.isfinite(grad_norm): step()`). The
    loss, the outputs and anything computed from the rank's own batch stay per rank."""
    while isinstance(value, cst.Call):
        callee = dotted_name(value.func) or ""
        if callee in ("float", "abs") and value.args:
            value = value.args[0].value
        elif isinstance(value.func, cst.Attribute) and value.func.attr.value in ("item", "cpu", "detach") \
                and not value.args:
            value = value.func.value
        else:
            break
    if not isinstance(value, cst.Call) or (dotted_name(value.func) or "").rpartition(".")[2] not in _GRADIENT_NORMS:
        return False
    backwards = [call for call in calls_within(loop.body) if isinstance(call.func, cst.Attribute)
                 and call.func.attr.value == "backward"]
    return any(facts.start_of(call) < facts.start_of(value) for call in backwards)


def _no_sync_on_micro_batches(facts: Facts, edits: Edits, setup: Plan, loop: cst.For) -> None:
    body = list(loop.body.body)
    conditional_step = next((s for s in body if isinstance(s, cst.If) and _steps_optimizer(facts, s)), None)
    skipped_step = next((s for s in body if isinstance(s, cst.If) and _steps_optimizer_otherwise(facts, s)), None)
    if conditional_step is None and skipped_step is not None:
        # `if batch.x.shape[0] == 1: pass` / `else: loss.backward(); optimizer.step()`: the
        # step taken on the other branch is as conditional as one under the `if`.
        local = sorted(name for name in names_in(skipped_step.test) & assigned_names(loop.body)
                       if not same_on_every_rank(facts, loop, name)
                       and not read_for_its_size_only(skipped_step.test, name))
        if local and not _counts_modulo(skipped_step.test):
            edits.report("DDP902", skipped_step, "optimizer step decided on a per-rank value: "
                         f"`{', '.join(local)}` differs per rank: a rank that skips its backward leaves "
                         "the others waiting in the gradient all-reduce (and the models drift apart)")
        return
    if conditional_step is not None and not _counts_modulo(conditional_step.test):
        # Not accumulation. A step decided on this rank's own loss, though, lets the ranks'
        # models drift apart: some step and some do not.
        local = sorted(name for name in names_in(conditional_step.test) & assigned_names(loop.body)
                       if not same_on_every_rank(facts, loop, name))
        if local:
            edits.report("DDP902", conditional_step, "optimizer step decided on a per-rank value: "
                         f"`{', '.join(local)}` differs per rank and the models drift apart")
        return
    step_if = conditional_step
    if step_if is None or _has_method_call(step_if, "backward"):
        # `if i % n_critic == 0: g_loss.backward(); optimizer_G.step()`: the backward goes with
        # its step (a WGAN's generator every n-th batch), so no gradient is accumulated.
        return
    # Where the setup's names are out of view (a method of a class the `__main__` block
    # drives, a helper module), the group itself says whether the model was wrapped.
    in_view = setup.sees_setup(facts, loop)
    if len(facts.models) != 1 or not in_view and edits.options.fsdp2:
        edits.report("DDP404", step_if)
        return
    model = _model_name_in(facts, loop)
    end = body.index(step_if)
    backward = [i for i in range(end) if _has_method_call(body[i], "backward")]
    forward = [i for i in range(end) if _calls_name(body[i], model)]
    if not backward or not forward or forward[0] > backward[-1]:
        edits.report("DDP404", step_if)
        return
    start, stop = forward[0], backward[-1]
    wrapped = body[start:stop + 1]
    assigned = set().union(*(assigned_names(s) for s in wrapped))
    # (Read with the edits planned inside it: `model.subdivisions` of a wrapped model is
    # `getattr(model, "module", model).subdivisions` in the copy before the forward too.)
    test = _test_as_the_step_sees_it(edits.expression(edits.code_edited(step_if.test)), body[stop + 1:end])
    if names_in(step_if.test) & assigned or test is None or edits.edits_any(body):
        edits.report("DDP404", step_if)
        return
    sync = facts.free_name("sync")
    if edits.options.fsdp2:
        # An FSDP2 module has no no_sync(): it is told, before each forward, whether to sync.
        gradient_sync = edits.statements(fsdp2.GRADIENT_SYNC_CODE.format(sync=sync, condition=edits.code(
            test), model=model))
        edits.insert_before(cast(Statement, body[start]), Insertion(gradient_sync, takes_blank_lines=True))
        edits.report("DDP401", step_if)
        return
    indent = facts.column_of(body[start]) - 1
    context = NO_SYNC_CONTEXT.format(sync=sync, model=model,
                                     distributed="distributed" if in_view else "dist.is_initialized()")
    if not in_view:
        edits.imports.add("dist")
    with_line = f"with {context}:" if fits(indent + 6, context) else \
        f"with (\n    {context}\n):"
    prefix = [edits.statement(f"{sync} = {edits.code(test)}\n").with_changes(
        leading_lines=[cst.EmptyLine(comment=cst.Comment(NO_SYNC_COMMENT))]
    )]
    template = cast(cst.With, edits.statement(f"{with_line}\n    pass\n"))  # parsed from `with ...:`
    edits.imports.add("contextlib")
    edits.expressions[loop] = _wrap_range(start, stop, len(body), prefix, template)
    edits.report("DDP401", step_if)


def _test_as_the_step_sees_it(test: cst.BaseExpression, between: list[cst.CSTNode]
                              ) -> Optional[cst.BaseExpression]:
    """Rule: the sync test is computed before the forward, the step's own test after the
    backward; a counter it reads that changes in between (`loss.backward(); step += 1; if step
    % accum == 0: optimizer.step()`) must be read as the step will see it, `(step + 1) % accum
    == 0`, or the all-reduce falls on the micro-batch after the step: the step then applies
    gradients no rank shared. A counter changed there any other way: None (DDP404)."""
    read = names_in(test)
    added: dict[str, cst.BaseExpression] = {}
    for statement in between:
        changed = assigned_names(statement) & read
        if not changed:
            continue
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 \
            else None
        if not (isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.AddAssign)
                and isinstance(small.target, cst.Name) and isinstance(small.value, cst.Integer)
                and small.target.value not in added):
            return None
        added[small.target.value] = small.value

    class _Ahead(cst.CSTTransformer):
        def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
            if updated.value not in added:
                return updated
            return cst.BinaryOperation(updated, cst.Add(), added[updated.value],
                                       lpar=[cst.LeftParen()], rpar=[cst.RightParen()])

        def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression:
            return updated.with_changes(attr=original.attr)  # `args.step` is no counter

    return cast(cst.BaseExpression, test.visit(_Ahead())) if added else test


def _model_name_in(facts: Facts, loop: cst.For) -> str:
    """The name the loop's function knows the model by: its own, or the parameter every call of
    that function hands it in as (`def train_one_epoch(model, loader, optimizer, scaler,
    accum_steps)` called as `train_one_epoch(net, ...)`): the micro-batches run the forward of
    that name, and its `no_sync()` is the wrapper's."""
    model = facts.models[0]
    function = facts.function_of(loop)
    if function is None or function is model.function:
        return model.name
    calls = facts.calls_of(function)
    for parameter in sorted(parameter_names(function)):
        handed = [handed_for(call, function, parameter) for call in calls]
        if calls and all(value is not None and dotted_name(value) == model.name for value in handed) \
                and all(facts.function_of(call) is model.function for call in calls):
            return parameter
    return model.name


def _wrap_range(start: int, stop: int, count: int, prefix: list[Statement],
                template: cst.With) -> Callable[[cst.For], cst.For]:
    def rewrite(updated: cst.For) -> cst.For:
        block = updated.body  # indented: the loop's body holds the `if` that steps
        if not isinstance(block, cst.IndentedBlock) or len(block.body) != count:
            return updated
        body = list(statements_in(block))
        inner = [body[start].with_changes(leading_lines=())] + [
            statement.with_changes(leading_lines=[
                line.with_changes(indent=False) if line.comment is None else line
                for line in statement.leading_lines
            ])
            for statement in body[start + 1:stop + 1]
        ]
        first = prefix[0]
        lines = list(body[start].leading_lines) + list(first.leading_lines)
        head = [first.with_changes(leading_lines=lines)] + prefix[1:]
        wrapped = template.with_changes(body=template.body.with_changes(body=inner))
        new_body = body[:start] + head + [wrapped] + body[stop + 1:]
        return updated.with_changes(body=updated.body.with_changes(body=new_body))

    return rewrite


def _steps_optimizer(facts: Facts, statement: cst.If) -> bool:
    """`optimizer.step()` or `scaler.step(optimizer)` in the if's body: a name that says so,
    or one an optimizer was assigned to (`opt = torch.optim.Adam(...)`, `self.opt`)."""
    return any(
        isinstance(call.func, cst.Attribute) and call.func.attr.value == "step"
        # `optimizer.step()` or `scaler.step(optimizer)`, not `scheduler.step()`.
        and any("optim" in name or name in facts.optimizer_names for name in _step_names(call))
        for call in calls_within(statement.body)
    )


def read_for_its_size_only(test: cst.BaseExpression, name: str) -> bool:
    """Rule: `if images.size(0) != batch_size: continue` (also `.size()[0]`, `.shape[0]`,
    `len(images)`) skips the short last batch. A DistributedSampler hands every rank the same
    number of samples (it pads, or drops, to an equal share), so the ranks' batches have the
    same sizes step by step and the skip is the same on every rank: the batch is read here
    for its size only."""
    reads = [node for node in find_all(test, cst.Name) if node.value == name]
    return bool(reads) and all(_is_size_read(test, read) for read in reads)


def _is_size_read(test: cst.BaseExpression, read: cst.Name) -> bool:
    return any(dotted_name(call.func) == "len" and len(call.args) == 1 and call.args[0].value is read
               for call in find_all(test, cst.Call)) or any(
        attribute.value is read and attribute.attr.value in ("size", "shape")
        for attribute in find_all(test, cst.Attribute))


def _steps_optimizer_otherwise(facts: Facts, statement: cst.If) -> bool:
    """`optimizer.step()` in the if's else (or elif) branch and not in its body."""
    return statement.orelse is not None and any(
        isinstance(call.func, cst.Attribute) and call.func.attr.value == "step"
        and any("optim" in name or name in facts.optimizer_names for name in _step_names(call))
        for call in calls_within(statement.orelse))


def _step_names(call: cst.Call) -> set[str]:
    """The names in a `.step()` call, and the dotted names of its receiver and arguments
    (`self.opt` of `self.opt.step()`)."""
    dotted = [dotted_name(cast(cst.Attribute, call.func).value), *(dotted_name(arg.value) for arg in call.args)]
    return names_in(call) | {name for name in dotted if name is not None}


def _counts_modulo(test: cst.BaseExpression) -> bool:
    found: list[cst.BinaryOperation] = []

    class _Modulo(cst.CSTVisitor):
        def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
            if isinstance(node.operator, cst.Modulo):
                found.append(node)

    traversal.visit(test, _Modulo())
    return bool(found)


def _has_method_call(node: cst.CSTNode, method: str) -> bool:
    return any(isinstance(c.func, cst.Attribute) and c.func.attr.value == method
               for c in calls_within(node))


def _calls_name(node: cst.CSTNode, name: str) -> bool:
    return any(dotted_name(c.func) == name for c in calls_within(node))


# --- decisions on the clock -----------------------------------------------------------------------

def agree_on_clock_stop(facts: Facts, edits: Edits, setup: Plan, stop: cst.If) -> bool:
    """`if time.time() - start > budget: break` once per epoch: decided on rank 0's clock and
    broadcast, so every rank leaves the epoch loop together (one broadcast per epoch, none per
    step). Where the setup's names are out of reach, False: the caller reports it."""
    if not setup.sees_setup(facts, stop):
        return False
    flag = facts.free_name("out_of_time")
    decision = facts.free_name("decision")
    device = "" if setup.cpu_only or _no_device_bound(facts, setup) else f", device={setup.device}"
    code = STOP_ON_CLOCK_CODE.format(flag=flag, test=edits.code(stop.test), decision=decision, device=device)
    edits.insert_before(stop, Insertion(edits.statements(code), takes_comments=True))
    edits.expressions[stop.test] = lambda _: cst.Name(flag)
    edits.imports.add("dist")
    edits.report("DDP405", stop)
    return True


def step_plateau_on_mean(edits: Edits, figure: cst.BaseExpression) -> None:
    """`scheduler.step(loss.item())` -> `scheduler.step(mean_over_ranks(loss.item()))`: the
    caller has made sure the step runs once per epoch on every rank (not per batch, not in an
    except handler, not under a test on this rank's own figures), so the one all-reduce the
    helper makes is reached by every rank, and by every rank the same number of times."""
    helper = MEAN_NAME
    edits.add_helper(MEAN_NAME, MEAN_HELPER, "dist", "torch")
    edits.expressions[figure] = lambda updated: cst.Call(cst.Name(helper), [cst.Arg(cast(cst.BaseExpression, updated))])
    edits.report("DDP409", figure)


# --- epoch figures ---------------------------------------------------------------------------------

def figures_anchor(facts: Facts, loop: cst.For) -> cst.BaseStatement:
    """The statement whose block holds the epoch's figures: the batch loop, or the `with`
    around it (`with tqdm(total=n) as bar:`, `with torch.set_grad_enabled(train):`), with
    `epoch_loss = 0` set before it and read after it. The figures are the epoch's once that
    statement ends, and are summed across ranks there."""
    anchor: cst.BaseStatement = loop
    while True:
        block = facts.parents.get(anchor)
        owner = facts.parents.get(block) if isinstance(block, cst.IndentedBlock) else None
        if not isinstance(owner, cst.With):
            return anchor
        anchor = owner


def _block_around_figures(facts: Facts, loop: cst.For) -> Optional[tuple[list[cst.BaseStatement], int]]:
    """The statements of the block that holds the batch loop's figures anchor (the loop, or
    the `with` around it), and the anchor's index among them: figures are set before it and
    read after it. None when the anchor is not directly in a block."""
    anchor = figures_anchor(facts, loop)
    block = facts.parents.get(anchor)
    if not isinstance(block, (cst.IndentedBlock, cst.Module)):
        return None
    statements: list[cst.BaseStatement] = list(block.body)
    return statements, statements.index(anchor)


def epoch_accumulators(facts: Facts, loop: cst.For) -> dict[str, cst.BaseExpression]:
    """`running_loss = 0.0` before the batch loop, `running_loss += ...` inside it, and used
    after it: the name and its initial literal, in the order they were set.

    A running figure read after the loop is the whole run's figure, whatever holds it: the
    entries of a dict set before the loop (`running = {"loss": 0.0, "batch_sizes": 0}` or
    `dict(loss=0.0, ...)`) that the loop adds to (`running["loss"] += loss.item() * n`) are
    such figures each, named as the code reads them (`running["loss"]`), when the dict is
    read after the loop (printed, written to a CSV row, appended to a history). So is a
    numpy array of counts (`seen = np.zeros(n_classes)`, `seen += np.bincount(...)`), which
    is summed as a Python value (_array_figures)."""
    around = _block_around_figures(facts, loop)
    if around is None:
        return {}
    statements, index = around
    initial: dict[str, cst.BaseExpression] = {}
    for statement in statements[:index]:
        for name, value in _names_set_before(statement):
            if isinstance(value, (cst.Integer, cst.Float)) or _makes_an_array(facts, value):
                initial[name] = value
            for key, entry in _numeric_entries(value).items():
                initial[f'{name}["{key}"]'] = entry
    added = _augmented_names(loop.body)
    used_after = _used_after(facts, loop, statements[index + 1:])
    return {name: value for name, value in initial.items()
            if name in added and name.partition("[")[0] in used_after}


# Calls that make a fresh numpy array a running figure (counts per class) starts from.
_ARRAY_MAKERS = frozenset({"numpy.zeros", "numpy.zeros_like"})


def _makes_an_array(facts: Facts, value: cst.BaseExpression) -> bool:
    return isinstance(value, cst.Call) and any(value is call for maker in _ARRAY_MAKERS
                                               for call in facts.calls_named.get(maker, ()))


def _reported_tensor_sums(facts: Facts, edits: Edits, loop: cst.For) -> bool:
    """Running figures kept in tensors are reported; summing the Python figures beside them
    would mix scopes (`accu_num.item() / sample_num`: this rank's hits over every rank's
    samples), so none is summed."""
    tensor_sums = tensor_accumulators(facts, loop)
    for name in tensor_sums:
        edits.report("DDP407", loop, f"running figure `{name}` read after the loop holds this rank's share: "
                     "a tensor ddpify does not sum across ranks (all_reduce it, and the figures read with it, "
                     "after the loop)")
    return bool(tensor_sums)


def _reported_rebound_sums(facts: Facts, edits: Edits, loop: cst.For) -> bool:
    """Rule: a running figure set before the batch loop and rebound inside it to a sum that
    reads it (`train_acc = [train_acc[0] + top1, train_acc[1] + top5]`, `hits = hits + n`), read
    after the loop, holds this rank's share, and ddpify does not sum it. Summing the `+=`
    figures beside it would mix scopes (`100 * train_acc[0] / train_num`: this rank's hits over
    every rank's samples, half the accuracy on 2 ranks), so none is summed and it is reported."""
    around = _block_around_figures(facts, loop)
    if around is None:
        return False
    statements, index = around
    started = {name for statement in statements[:index] for name, _ in _names_set_before(statement)}
    used_after = _used_after(facts, loop, statements[index + 1:])
    rebound: list[tuple[str, cst.Assign]] = []
    for assign in find_all(loop.body, cst.Assign):
        for target in assign.targets:
            name = target.target.value if isinstance(target.target, cst.Name) else None
            if name in started and name in used_after and any(
                    _adds_to(operation, name) for operation in find_all(assign.value, cst.BinaryOperation)):
                rebound.append((name, assign))
    first: dict[str, cst.Assign] = {}
    for name, assign in rebound:
        first.setdefault(name, assign)
    for name, assign in first.items():
        edits.report("DDP407", assign, f"running figure `{name}` read after the loop holds this rank's share: "
                     "rebound to a sum of itself, which ddpify does not sum across ranks (all_reduce it, and the "
                     "figures read with it, after the loop)")
    return bool(rebound)


def _adds_to(operation: cst.BinaryOperation, name: str) -> bool:
    """`name[0] + top1` or `hits + n`: an addition to the figure itself (or an entry of it) of
    something other than a number literal. Not `step = step + 1` (counts steps, the same on
    every rank) nor `ema = 0.9 * ema + 0.1 * loss.item()` (a smoothed figure, not a sum)."""
    if not isinstance(operation.operator, cst.Add):
        return False
    sides = (operation.left, operation.right)
    return any(_the_figure(side, name) and not isinstance(other, (cst.Integer, cst.Float))
               for side, other in (sides, sides[::-1]))


def _the_figure(node: cst.BaseExpression, name: str) -> bool:
    while isinstance(node, cst.Subscript):
        node = node.value
    return isinstance(node, cst.Name) and node.value == name


# Calls that make a fresh tensor a running figure starts from (`torch.zeros(1).to(device)`).
_TENSOR_MAKERS = frozenset({"torch.zeros", "torch.tensor", "torch.zeros_like", "torch.FloatTensor"})


def tensor_accumulators(facts: Facts, loop: cst.For) -> list[str]:
    """Rule: `accu_num = torch.zeros(1).to(device)` before the batch loop, `accu_num += ...`
    inside it, and read after it (the ratio a train_one_epoch returns): a running figure kept
    in a tensor, which holds this rank's share of a sharded pass."""
    around = _block_around_figures(facts, loop)
    if around is None:
        return []
    statements, index = around
    started: list[str] = []
    for statement in statements[:index]:
        for name, value in _names_set_before(statement):
            while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and isinstance(
                    value.func.value, cst.Call) and value.func.attr.value in ("to", "cuda", "float", "double"):
                value = value.func.value
            if isinstance(value, cst.Call) and any(value is call for maker in _TENSOR_MAKERS
                                                   for call in facts.calls_named.get(maker, ())):
                started.append(name)
    used_after = _used_after(facts, loop, statements[index + 1:])
    added = _augmented_names(loop.body)
    return [name for name in dict.fromkeys(started) if name in added and name in used_after]


def _numeric_entries(value: cst.BaseExpression) -> dict[str, cst.BaseExpression]:
    """The entries of a dict literal (`{"loss": 0.0}`) or of `dict(loss=0.0)` whose key is a
    plain string and whose value a number literal: what a running figure starts from."""
    pairs: list[tuple[Optional[str], cst.BaseExpression]] = []
    if isinstance(value, cst.Dict):
        pairs = [(string_value(element.key), element.value) if isinstance(element, cst.DictElement)
                 else (None, element.value) for element in value.elements]
    elif isinstance(value, cst.Call) and dotted_name(value.func) == "dict":
        pairs = [(arg.keyword.value if arg.keyword is not None and not arg.star else None, arg.value)
                 for arg in value.args]
    return {key: entry for key, entry in pairs if key is not None and _plain_key(key)
            and isinstance(entry, (cst.Integer, cst.Float))}


def _plain_key(key: str) -> bool:
    return '"' not in key and "\\" not in key and "\n" not in key


def figure_named(target: cst.BaseExpression) -> Optional[str]:
    """The running figure an assignment target names: `running_loss`, or a dict's entry
    `running["loss"]` (either quote), spelled as epoch_accumulators names it."""
    if isinstance(target, cst.Name):
        return target.value
    if (isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name) and len(target.slice) == 1
            and isinstance(target.slice[0].slice, cst.Index)):
        key = string_value(target.slice[0].slice.value)
        if key is not None and _plain_key(key):
            return f'{target.value.value}["{key}"]'
    return None


def epoch_lists(facts: Facts, loop: cst.For) -> list[str]:
    """`losses = []` before the batch loop, `losses.append(loss.item())` inside it, and used
    after it (`np.mean(losses)`, `sum(losses) / len(losses)`): the same epoch figure as a
    running sum, kept a value per batch. Only lists of Python numbers: a tensor appended may
    sit on the GPU or hold its graph."""
    anchor = figures_anchor(facts, loop)
    block = facts.parents.get(anchor)
    if not isinstance(block, (cst.IndentedBlock, cst.Module)):
        return []
    statements = list(block.body)
    index = statements.index(anchor)
    emptied = [name for statement in statements[:index] for name, value in _names_set_before(statement)
               if isinstance(value, cst.List) and not value.elements]
    used_after = _used_after(facts, loop, statements[index + 1:])
    return [name for name in dict.fromkeys(emptied) if name in used_after and _appends_numbers(loop.body, name)
            and not _positions_read(statements[index + 1:], name)]


# Calls whose result depends on where in the list a value sits.
_POSITIONAL_CALLS = frozenset({"enumerate", "zip"})


def _positions_read(statements: list[cst.BaseStatement], name: str) -> bool:
    """After the loop, the list is read by position (`lrs[losses.index(min(losses))]`,
    `np.argmin(losses)`, `losses[-1]`, `zip(lrs, losses)`): the k-th value is the k-th batch's
    of this rank, lined up with other per-batch lists. Joined across ranks it would be
    longer than they are and in another order, so it stays this rank's (a setting picked
    from it is DDP408's to report)."""
    for statement in statements:
        for call in calls_within(statement):
            function = call.func
            if isinstance(function, cst.Attribute) and function.attr.value == "index" \
                    and dotted_name(function.value) == name:
                return True
            called = dotted_name(function) or ""
            if (called in _POSITIONAL_CALLS or called.rpartition(".")[2] in ("argmin", "argmax")) and any(
                    dotted_name(arg.value) == name for arg in call.args):
                return True
        if any(dotted_name(subscript.value) == name for subscript in find_all(statement, cst.Subscript)):
            return True
    return False


def _names_set_before(statement: cst.CSTNode) -> list[tuple[str, cst.BaseExpression]]:
    """The names a line of the epoch's set-up binds, each with its own value, in every
    spelling people reset their figures: `total = 0.0`, `correct = total = 0` (each name
    the same value), `running_loss, correct, total = 0.0, 0, 0` (element by element) and
    `losses, top1 = [AverageMeter() for _ in range(2)]` (each name one object the
    comprehension makes)."""
    found: list[tuple[str, cst.BaseExpression]] = []
    if not isinstance(statement, cst.SimpleStatementLine):
        return found
    for small in statement.body:
        if not isinstance(small, cst.Assign):
            continue
        for assign_target in small.targets:
            found.extend((target.value, value) for target, value in made_one_each(assign_target.target, small.value)
                         if isinstance(target, cst.Name))
    return found



def _statements_after(facts: Facts, loop: cst.CSTNode) -> list[cst.CSTNode]:
    """The statements after the loop in its block and in each block around it, up to its
    function: where the epoch's figure is divided (`epoch_loss / len(loader)` once the epoch
    loop is over counts this rank's batches too)."""
    following: list[cst.CSTNode] = []
    node: cst.CSTNode = loop
    while True:
        block = facts.parents.get(node)
        if not isinstance(block, (cst.IndentedBlock, cst.Module)):
            return following
        body: list[cst.CSTNode] = list(block.body)
        following.extend(body[body.index(node) + 1:])
        owner = facts.parents.get(block)
        if owner is None or isinstance(owner, (cst.FunctionDef, cst.ClassDef)):
            return following
        node = owner


def _used_after(facts: Facts, loop: cst.For, following: list[cst.BaseStatement]) -> set[str]:
    """Names the rest of the loop's block mentions, or that are read after the loop on any
    path: `print(epoch_loss / len(loader))` after the epoch loop reads the last epoch's sum."""
    return set().union(names_read_after(facts, loop), *(names_in(s) for s in following))


def _appends_numbers(body: cst.CSTNode, name: str) -> bool:
    """Every method called on `name` in body is append, of a number made with .item(),
    float() or int(), of such a number times a batch's size (`loss.item() * x.size(0)`), or
    of a name body binds only to such numbers (`acc = float(correct) / float(x.shape[0])`,
    then `accuracies.append(acc)`)."""
    methods = [call for call in calls_within(body) if isinstance(call.func, cst.Attribute)
               and isinstance(call.func.value, cst.Name) and call.func.value.value == name]
    return bool(methods) and all(
        call.func.attr.value == "append" and len(call.args) == 1
        and (_item_value(call.args[0].value) or _bound_to_numbers(body, call.args[0].value))
        for call in methods if isinstance(call.func, cst.Attribute))


def _bound_to_numbers(body: cst.CSTNode, value: cst.BaseExpression) -> bool:
    """`value` is a name that every assignment in body binds to a Python number (_item_value)."""
    if not isinstance(value, cst.Name):
        return False
    if any(isinstance(augmented.target, cst.Name) and augmented.target.value == value.value
           for augmented in find_all(body, cst.AugAssign)):
        return False  # (`acc += ...`: a running figure, not read here)
    bound = [assign.value for assign in find_all(body, cst.Assign)
             if any(isinstance(target.target, cst.Name) and target.target.value == value.value
                    for target in assign.targets)]
    return bool(bound) and all(_item_value(assigned) for assigned in bound)


def _item_value(value: cst.BaseExpression) -> bool:
    """A Python number: a literal, float()/int() of something, `x.item()`, or a product or
    quotient of such numbers with each other or with a batch's size (`x.size(0)`, `len(y)`)."""
    if isinstance(value, (cst.Integer, cst.Float)):
        return True
    if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, (cst.Multiply, cst.Divide)):
        sides = (value.left, value.right)
        return any(_item_value(side) for side in sides) and all(
            _item_value(side) or _a_size(side) for side in sides)
    if isinstance(value, cst.Call) and dotted_name(value.func) in ("float", "int"):
        return True
    return isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value == "item"


def _a_size(value: cst.BaseExpression) -> bool:
    """An int count of a batch: `x.size(0)`, `x.shape[0]`, `len(y)`."""
    if isinstance(value, cst.Call):
        return dotted_name(value.func) == "len" or isinstance(value.func, cst.Attribute) \
            and value.func.attr.value == "size" and len(value.args) == 1
    return isinstance(value, cst.Subscript) and isinstance(value.value, cst.Attribute) \
        and value.value.attr.value == "shape"


def epoch_meters(facts: Facts, loop: cst.For) -> dict[str, list[cst.Call]]:
    """`losses = AverageMeter()` before the batch loop, `losses.update(loss.item(), n)` in it,
    and `losses.avg` (`.sum`, `.count`) read after it: the same running figure as a sum kept
    by hand, held by an object. The meter's name -> its update() calls in the loop."""
    around = _block_around_figures(facts, loop)
    if around is None:
        return {}
    statements, index = around
    made = {name for statement in statements[:index] for name, value in _names_set_before(statement)
            if isinstance(value, cst.Call)}
    updates: dict[str, list[cst.Call]] = {}
    for call in calls_within(loop.body):
        if isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Name) \
                and call.func.value.value in made and call.func.attr.value == "update":
            updates.setdefault(call.func.value.value, []).append(call)
    read = {node.value.value for statement in [*statements[index + 1:], *_statements_after(facts, loop)]
            for node in find_all(statement, cst.Attribute) if isinstance(node.value, cst.Name)
            and node.attr.value in meters.RUNNING_MEAN_ATTRIBUTES}
    return {name: calls for name, calls in updates.items() if name in read}


def _meter_read_with_certainty(facts: Facts, edits: Edits, loop: cst.For, name: str,
                               updates: list[cst.Call]) -> tuple[Optional[str], str]:
    """The meter's class is one meters.py reads as a running mean (in this file or another
    module of the project), the loop calls nothing on it but update(), and each update adds
    a Python number (`loss.item()`, `acc1[0].item()`), which a float64 sum carries. Else
    None, with the reason (a tensor handed to update() may sit on the GPU with its graph)."""
    callee = _maker_of(facts, loop, name) or ""
    kind = meters.running_mean_class(facts.classes[callee]) if callee in facts.classes \
        else facts.running_mean_makers.get(facts.made_in_other_modules.get(name, ""))
    other_calls = [call for call in calls_within(loop.body) if isinstance(call.func, cst.Attribute)
                   and isinstance(call.func.value, cst.Name) and call.func.value.value == name
                   and call not in updates]
    if other_calls:
        return None, f"the loop calls `{edits.code(other_calls[0].func)}()` on it besides update()"
    for call in updates:
        if not (call.args and len(call.args) <= 2 and not any(arg.star or arg.keyword for arg in call.args)):
            return None, "ddpify cannot read what its update() is handed"
        if not _number_argument(facts, loop.body, call.args[0].value):
            value = edits.code(call.args[0].value)
            return None, f"its update() is handed `{value}`, not a Python number (`{value}.item()` is one)"
    return kind, "ddpify cannot read its class as a sum and a count"


def _maker_of(facts: Facts, loop: cst.For, name: str) -> Optional[str]:
    """What `name = Maker(...)` before the batch loop calls."""
    anchor = figures_anchor(facts, loop)
    block = facts.parents.get(anchor)
    if not isinstance(block, (cst.IndentedBlock, cst.Module)):
        return None
    statements = list(block.body)
    for statement in statements[:statements.index(anchor)]:
        for bound, value in _names_set_before(statement):
            if bound == name and isinstance(value, cst.Call):
                return dotted_name(value.func)
    return None


def _number_argument(facts: Facts, body: cst.CSTNode, value: cst.BaseExpression) -> bool:
    """A Python number: made with .item(), float() or int() (a name the loop binds only to
    such values), or returned by a function of this file or of another module of the
    project that returns only Python numbers (`acc1 = accuracy(preds, targets, 1)` whose
    return is `correct.item() * 100.0 / n`), not a tensor that may sit on the GPU with its
    graph."""
    if isinstance(value, cst.Name):
        values = [assign.value for assign in find_all(body, cst.Assign) if any(
            isinstance(target.target, cst.Name) and target.target.value == value.value for target in assign.targets)]
        return bool(values) and all(not isinstance(each, cst.Name) and _number_argument(facts, body, each)
                                    for each in values)
    if isinstance(value, cst.Call) and (dotted_name(value.func) in facts.number_functions
                                        or _returns_python_numbers(facts, value)):
        return True
    return _item_value(value) or any(isinstance(call.func, cst.Attribute) and call.func.attr.value == "item"
                                     for call in calls_within(value))


def _meter_figures(facts: Facts, edits: Edits, loop: cst.For) -> dict[str, tuple[bool, str]]:
    """The meters whose sums are summed across ranks (name -> whether their counts are whole
    numbers, and how their average follows); each meter ddpify cannot read with certainty is
    reported (DDP407)."""
    summed: dict[str, tuple[bool, str]] = {}
    for name, updates in epoch_meters(facts, loop).items():
        kind, reason = _meter_read_with_certainty(facts, edits, loop, name, updates)
        if kind is not None:
            summed[name] = (all(len(call.args) < 2 or _whole_number(call.args[1].value)
                                or _whole_name(loop.body, call.args[1].value) for call in updates), kind)
        else:
            edits.report("DDP407", updates[0], f"running figure `{name}` read after the loop holds this rank's share: "
                         f"{reason}")
    return summed


def _reduce_epoch_figures(facts: Facts, edits: Edits, setup: Plan, loop: cst.For) -> None:
    accumulators = epoch_accumulators(facts, loop)
    lists = epoch_lists(facts, loop)
    if not _sharded(facts, setup, loop) or _micro_batches_of_one_step(facts, loop):
        return
    if _reported_tensor_sums(facts, edits, loop) or _reported_rebound_sums(facts, edits, loop):
        return
    meter_kinds = _meter_figures(facts, edits, loop)
    meter_counts = {meter: whole for meter, (whole, _) in meter_kinds.items()}
    averaged = [meter for meter, (_, kind) in meter_kinds.items() if kind == meters.ASSIGNED]
    for meter in meter_counts:
        accumulators[f"{meter}.sum"] = cst.Float("0.0")
        accumulators[f"{meter}.count"] = cst.Integer("0") if meter_counts[meter] else cst.Float("0.0")
    if not (accumulators or lists):
        return
    setup.reduced_meters.setdefault(loop, set()).update(meter_counts)
    after = _statements_after(facts, loop)
    # A pass over a dict of loaders counts its own batches too (`len(loaders[phase])`).
    loaders = {name for _, name in facts.loader_holders()} | set(facts.names_iterated_by(loop))
    per_batch = _divided_by_len(after, loaders, _batch_index(loop), facts.assigned_values)
    per_batch = {**_divided_by_callers(facts, loop), **per_batch}
    names = list(accumulators)
    # A pass over a dict of loaders whose evaluation entries stay whole is a shard only for
    # the training keys: its sums are summed across ranks under that test alone.
    key_test = setup.partly_sharded_loops.get(loop)
    shard_test = "" if key_test is None else f" and {key_test}"
    if key_test is not None and "DistributedSampler" in key_test:
        edits.imports.add("DistributedSampler")  # (epochs.SHARDED_THERE: a loader another module shards)
    if not setup.sees_setup(facts, loop) or any(_makes_an_array(facts, value) for value in accumulators.values()):
        # (Arrays do not fit the float64 tensor of the scalars: every figure is gathered as
        # a Python value and summed, elementwise for an array.)
        _gather_epoch_figures(facts, edits, setup, loop, names, per_batch, shard_test, lists, averaged)
        return
    indent = facts.column_of(loop) - 1
    lines = _if_lines(indent, f"distributed{shard_test}")
    if names:
        # A script that never chooses a device sums on the CPU, as its Gloo group needs; one
        # whose device is chosen in another module names none here, and its group (each
        # device type's default backend) sums CPU tensors with Gloo.
        device = "" if setup.cpu_only or _no_device_bound(facts, setup) else f", device={setup.device}"
        lines += [f"    {REDUCE_COMMENT}", f"    totals = {_totals_tensor(indent, names, device)}",
                  "    dist.all_reduce(totals)"]
    for position, name in enumerate(names):
        value = _total_value(facts, loop, name, position, accumulators[name], meter_counts)
        if name in per_batch:
            lines.append(f"    # Each rank ran {per_batch[name]}: the mean of the ranks' sums.")
            if " if " in value:
                value = f"({value})"  # the mean of either kind of total, not of the else branch alone
            value += " / dist.get_world_size()"
        if not fits(indent, f"    {name} = {value}"):
            lines.extend([f"    {name} = (", f"        {value}", "    )"])  # as black wraps it
        else:
            lines.append(f"    {name} = {value}")
    lines += _averages_again(averaged)
    lines += _merged_lists(facts, edits, lists)
    edits.insert_after(figures_anchor(facts, loop), edits.statements("\n".join(lines) + "\n"))
    setup.reduced_epoch_loops.add(loop)
    edits.report("DDP402", loop)


def _micro_batches_of_one_step(facts: Facts, loop: cst.For) -> bool:
    """Rule: `for _ in range(iter_size): x, y = next(loader_iter); ...; loss.backward()` with
    the optimizer's step after the loop, in the loop around it: the loop draws the
    micro-batches of one step, so what it sums (`loss += float(iter_loss)`) is that step's
    figure, not the epoch's. It stays this rank's, as any per-step figure does: no
    collective is added to every step, and the figure keeps the original's scale."""
    if not _has_method_call(loop.body, "backward") or _steps_in(facts, loop.body):
        return False
    outer = next(iter(facts.enclosing_loops(loop)), None)
    return outer is not None and any(_steps_in(facts, statement) for statement in _statements_after_in(outer, loop))


def _steps_in(facts: Facts, node: cst.CSTNode) -> bool:
    return any(isinstance(call.func, cst.Attribute) and call.func.attr.value == "step"
               and any("optim" in name or name in facts.optimizer_names for name in _step_names(call))
               for call in calls_within(node))


def _statements_after_in(outer: cst.For, loop: cst.For) -> list[cst.CSTNode]:
    """The statements of the outer loop's body after the one that holds `loop`."""
    body: list[cst.CSTNode] = list(outer.body.body) if isinstance(outer.body, cst.IndentedBlock) else []
    holding = next((i for i, statement in enumerate(body) if statement is loop
                    or any(found is loop for found in find_all(statement, cst.For))), None)
    return body[holding + 1:] if holding is not None else []


def _totals_tensor(indent: int, names: list[str], device: str) -> str:
    """`torch.tensor([a, b], dtype=torch.float64, device=device)`, split as black splits it
    where it does not fit its line: inside the call, then one figure a line."""
    inner = f"[{', '.join(names)}], dtype=torch.float64{device}"
    if fits(indent + 4 + len("totals = "), f"torch.tensor({inner})"):
        return f"torch.tensor({inner})"
    if fits(indent + 8, inner):
        return f"torch.tensor(\n        {inner}\n    )"
    figures = "".join(f"            {name},\n" for name in names)
    keywords = "".join(f"        {keyword.strip()},\n" for keyword in f"dtype=torch.float64{device}".split(","))
    return f"torch.tensor(\n        [\n{figures}        ],\n{keywords}    )"


def _total_value(facts: Facts, loop: cst.For, name: str, position: int, initial: cst.BaseExpression,
                 meter_counts: dict[str, bool]) -> str:
    """The summed figure, of the type the loop kept it in."""
    meter = name[:-len(".count")] if name.endswith(".count") else None
    if meter in meter_counts:
        return f"int(totals[{position}])" if meter_counts[meter] else f"totals[{position}].item()"
    if not _sums_python_numbers(facts, loop.body, name):
        # `running_corrects += torch.sum(preds == labels)` sums tensors: the total stays
        # a tensor like the one it replaces (`running_corrects.double()` after the loop).
        return f"totals[{position}].to({name}) if torch.is_tensor({name}) else totals[{position}].item()"
    if isinstance(initial, cst.Integer) and _counts(loop.body, name):
        return f"int(totals[{position}])"
    return f"totals[{position}].item()"


def _averages_again(meters: Iterable[str]) -> list[str]:
    """A meter's average, from its sum and count summed across ranks (a meter whose `avg` is a
    property of the two computes it again itself)."""
    return [f"    {meter}.avg = {meter}.sum / {meter}.count" for meter in meters]


def _if_lines(indent: int, test: str) -> list[str]:
    """`if test:`, or, too long for its line, split as black splits it: inside the last call's
    parentheses (`isinstance(getattr(loader, "sampler", None), DistributedSampler)`)."""
    line = f"if {test}:"
    if fits(indent, line) or not test.endswith(")") or "(" not in test:
        return [line]
    head, _, inner = test.partition("isinstance(") if "isinstance(" in test else ("", "", "")
    if not inner:
        return [line]
    return [f"if {head}isinstance(", f"    {inner[:-1]}", "):"]


def _merged_lists(facts: Facts, edits: Edits, lists: list[str]) -> list[str]:
    """Each rank's per-batch values, joined in rank order, in one gather: a mean, sum or
    count of the list is then the epoch's, as one process kept it."""
    if not lists:
        return []
    gather = collectives.use(edits)
    if len(lists) == 1:
        return [f"    {LIST_COMMENT}", f"    {lists[0]} = [value for share in {gather}({lists[0]}) for value in share]"]
    shares = facts.free_name("list_shares")
    lines = [f"    {LIST_COMMENT}", f"    {shares} = {gather}(({', '.join(lists)}))"]
    for position, name in enumerate(lists):
        lines.append(f"    {name} = [value for share in {shares} for value in share[{position}]]")
    return lines


def _gather_epoch_figures(facts: Facts, edits: Edits, setup: Plan, loop: cst.For, names: list[str],
                          per_batch: dict[str, str], shard_test: str, lists: list[str],
                          meter_names: list[str]) -> None:
    """The same sums in a function the setup's names do not reach (a train_model(model,
    loader) helper): gathered as Python numbers, which needs no device and keeps each
    figure's type."""
    shares = facts.free_name("shares")
    gathered = names[0] if len(names) == 1 else f"({', '.join(names)})"
    lines = _if_lines(facts.column_of(figures_anchor(facts, loop)) - 1, f"dist.is_initialized(){shard_test}")
    if names:
        lines += [f"    {REDUCE_COMMENT}", f"    {shares} = {collectives.use(edits)}({gathered})"]
    for position, name in enumerate(names):
        total = f"sum({shares})" if len(names) == 1 else f"sum(share[{position}] for share in {shares})"
        if name in per_batch:
            lines.append(f"    # Each rank ran {per_batch[name]}: the mean of the ranks' sums.")
            total += " / dist.get_world_size()"
        lines.append(f"    {name} = {total}")
    lines += _averages_again(meter_names)
    lines += _merged_lists(facts, edits, lists)
    edits.imports.add("dist")
    edits.insert_after(figures_anchor(facts, loop), edits.statements("\n".join(lines) + "\n"))
    setup.reduced_epoch_loops.add(loop)
    edits.report("DDP402", loop)


def _sharded(facts: Facts, setup: Plan, loop: cst.For) -> bool:
    """The loop runs over a loader that data.py gave a sampler that shards it (whatever its
    kind: each rank draws 1/N of a WeightedRandomSampler's draw too), over batches cut
    by hand that each rank takes its share of, or over a dict of loaders some of whose
    entries are sharded (loader_dicts.py)."""
    if loop in setup.sharded_loops or loop in setup.partly_sharded_loops:
        return True
    return any(loop in facts.loops_over_values(facts.loader_holders_of(loader))
               for loader in setup.loaders_given_a_sampler)


def _sums_python_numbers(facts: Facts, node: cst.CSTNode, name: str) -> bool:
    """Every `name += ...` in node adds a Python number: a literal, a name, a value made
    with .item(), len(), int(), float(), `x.size(0)`, `x.numel()` or `x.shape[0]`, or what a
    function of this file returns that only returns such values."""
    return all(_python_number(value) or _returns_python_numbers(facts, value)
               for value in _increments(node, name))


def _returns_python_numbers(facts: Facts, value: cst.BaseExpression) -> bool:
    """A call of a function of this file, or of another module of the project
    (facts.number_functions), whose every return is a Python number."""
    if isinstance(value, cst.Call) and dotted_name(value.func) in facts.number_functions:
        return True
    function = facts.functions.get(dotted_name(value.func) or "") if isinstance(value, cst.Call) else None
    if function is None:
        return False
    returned: list[Optional[cst.BaseExpression]] = []

    class _Returns(cst.CSTVisitor):
        def visit_Return(self, node: cst.Return) -> None:
            returned.append(node.value)

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is function

    traversal.visit(function, _Returns())
    return bool(returned) and all(value is not None and _python_number(value) for value in returned)


def _python_number(value: cst.BaseExpression) -> bool:
    if isinstance(value, (cst.Integer, cst.Float, cst.Name)):
        return True
    if any(isinstance(call.func, cst.Attribute) and call.func.attr.value == "item" for call in calls_within(value)):
        return True
    if isinstance(value, cst.Call):
        function = dotted_name(value.func) or ""
        return function in ("len", "int", "float") or function.endswith((".size", ".numel"))
    return isinstance(value, cst.Subscript) and (dotted_name(value.value) or "").endswith(".shape")


def _counts(node: cst.CSTNode, name: str) -> bool:
    """Every `name += ...` adds a whole number (a count of correct predictions, a batch
    size): `train_loss = 0` that sums `loss.item()` or `loss.item() * x.size(0)` is a float
    and stays one."""
    increments = _increments(node, name)
    return bool(increments) and all(_whole_number(value) or _whole_name(node, value) for value in increments)


def _whole_name(node: cst.CSTNode, value: cst.BaseExpression) -> bool:
    """`batch_size = x.size(0)` in the loop, then `total += batch_size`: a name every
    assignment of the loop gives a whole number."""
    if not isinstance(value, cst.Name):
        return False
    values = [assign.value for assign in find_all(node, cst.Assign) if any(
        isinstance(target.target, cst.Name) and target.target.value == value.value for target in assign.targets)]
    return bool(values) and all(_whole_number(each) for each in values)


def _increments(node: cst.CSTNode, name: str) -> list[cst.BaseExpression]:
    """What each `name += ...` in node adds."""
    increments: list[cst.BaseExpression] = []

    class _Increments(cst.CSTVisitor):
        def visit_AugAssign(self, assign: cst.AugAssign) -> None:
            if figure_named(assign.target) == name:
                increments.append(assign.value)

    traversal.visit(node, _Increments())
    return increments


# Methods whose result is a whole number when what they are called on is: `.sum()` of a count,
# `.item()` of it, and the integer casts and moves on the way. (`.float()` makes the Python value
# a float, which the float sum keeps as it is.)
WHOLE_IF_RECEIVER_IS = frozenset({"item", "sum", "long", "int", "cpu", "detach"})
# Methods that give a whole number, or booleans that sum to one, whatever they are called on.
WHOLE_METHODS = frozenset({"size", "numel", "count_nonzero", "argmax", "eq", "ne"})
WHOLE_OPERATORS = (cst.Add, cst.Subtract, cst.Multiply, cst.FloorDivide)


def _whole_number(value: cst.BaseExpression) -> bool:
    """A Python int, read from how the value is built: an integer, a size (`x.size(0)`,
    `len(y)`, `x.shape[0]`, `y.numel()`), a count of matches (a comparison or `.eq()`,
    summed, `.item()`), and +, -, * and // of those. One factor that is not (`loss.item() *
    x.size(0)`, `(loss * n).item()`, a true division, a `.float()` on the way) makes a float:
    cast back with int() after the all-reduce it would lose its fraction."""
    if isinstance(value, cst.Integer):
        return True
    if isinstance(value, cst.Comparison):
        return True
    if isinstance(value, cst.UnaryOperation):
        return _whole_number(value.expression)
    if isinstance(value, cst.BinaryOperation):
        return isinstance(value.operator, WHOLE_OPERATORS) and _whole_number(value.left) and _whole_number(value.right)
    if isinstance(value, cst.Subscript):  # `x.shape[0]`
        return isinstance(value.value, cst.Attribute) and value.value.attr.value == "shape"
    if isinstance(value, (cst.GeneratorExp, cst.ListComp)):  # `sum(p == t for p, t in ...)`
        return _whole_number(value.elt)
    if not isinstance(value, cst.Call):
        return False
    function = dotted_name(value.func) or ""
    if function in ("len", "int"):
        return True
    if function in ("sum", "torch.sum", "torch.count_nonzero") and value.args:
        return function == "torch.count_nonzero" or _whole_number(value.args[0].value)
    if not isinstance(value.func, cst.Attribute):
        return False
    method = value.func.attr.value
    if method in WHOLE_METHODS:
        return True
    return method in WHOLE_IF_RECEIVER_IS and _whole_number(value.func.value)


def _batch_index(loop: cst.For) -> Optional[str]:
    """`i` in `for i, batch in enumerate(loader, 1)`: after the loop, this rank's batch count
    (every rank runs as many batches as the others)."""
    target, iterated = loop.target, loop.iter
    if (isinstance(target, cst.Tuple) and target.elements and isinstance(target.elements[0].value, cst.Name)
            and isinstance(iterated, cst.Call) and dotted_name(iterated.func) == "enumerate"):
        return target.elements[0].value.value
    return None


def _divided_by_len(statements: Iterable[cst.CSTNode], loaders: set[str], batch_index: Optional[str] = None,
                    assigned: Optional[dict[str, list[cst.BaseExpression]]] = None) -> dict[str, str]:
    """A sum over this rank's batches divided by this rank's batch count, by name: however the
    division is spelled (`running_loss / len(train_loader)`, `epoch_loss /= len(loader)`,
    `total / i` or `total / (step + 1)` with the batch loop's enumerate index). The figure is
    the same in all of them; `len(train_dataset)` counts the whole set, which the summed figure
    covers."""
    found: dict[str, str] = {}

    class _Divisions(cst.CSTVisitor):
        def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
            figure = figure_named(node.left)
            if isinstance(node.operator, cst.Divide) and figure is not None:
                self.divided(figure, node.right)

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            figure = figure_named(node.target)
            if isinstance(node.operator, cst.DivideAssign) and figure is not None:
                self.divided(figure, node.value)

        def divided(self, name: str, divisor: cst.BaseExpression) -> None:
            count = _rank_batch_count(divisor, loaders, batch_index, assigned or {})
            if count is not None and name.partition("[")[0] not in rebound:
                found[name] = count

    # A name bound again (a later evaluation's `total = 0.0`) is another figure from there on.
    rebound: set[str] = set()
    for statement in statements:
        traversal.visit(statement, _Divisions())
        rebound |= assigned_names(statement)
    return found


def _divided_by_callers(facts: Facts, loop: cst.For) -> dict[str, str]:
    """Rule: a function that returns the sums of its pass over a loader it is given
    (`return loss_epoch, accuracy_epoch`), each of whose calls binds them
    (`loss_epoch, accuracy_epoch = train(args, train_loader, ...)`) and then divides them by
    that loader's batch count (`loss_epoch / len(train_loader)`), has them divided by this
    rank's count, as a division after the loop in the function itself would: summed across
    ranks, the figure is the mean of the ranks' sums. By name inside the function; empty
    unless every call divides a figure the same way."""
    function = facts.function_of(loop)
    returns = [found for found in find_all(function.body, cst.Return) if found.value is not None] if (
        function is not None) else []
    if function is None or len(returns) != 1 or returns[0].value is None:
        return {}
    value = returns[0].value
    elements = [element.value for element in value.elements] if isinstance(value, cst.Tuple) else [value]
    figures = [figure_named(element) for element in elements]
    parameters = [param.name.value for param in function.params.params]
    iterated = [name for name in facts.names_iterated_by(loop) if name in parameters]
    calls = facts.calls_of(function)
    if len(iterated) != 1 or not calls:
        return {}
    found: Optional[dict[str, str]] = None
    for call in calls:
        loader = argument_for(call, iterated[0], parameters.index(iterated[0]))
        loader_name = dotted_name(loader) if loader is not None else None
        if loader_name is None:
            return {}
        around = facts.parents.get(call)
        if isinstance(around, cst.BinaryOperation) and isinstance(around.operator, cst.Divide) \
                and around.left is call and len(figures) == 1 and figures[0] is not None:
            # `mean = fit(loader, ...) / len(loader)`: the one figure, divided on the spot.
            count = _rank_batch_count(around.right, {loader_name}, None, facts.assigned_values)
            here = {figures[0]: count} if count is not None else {}
            found = here if found is None else {figure: n for figure, n in found.items() if here.get(figure) == n}
            continue
        statement = facts.statement_of(call)
        assign = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
        if not isinstance(assign, cst.Assign) or assign.value is not call or len(assign.targets) != 1:
            return {}
        target = assign.targets[0].target
        bound = [element.value for element in target.elements] if isinstance(target, cst.Tuple) else [target]
        if len(bound) != len(figures):
            return {}
        divided = _divided_by_len(_statements_after(facts, statement), {loader_name}, None, facts.assigned_values)
        here = {figure: divided[name] for name, figure in zip((figure_named(each) for each in bound), figures)
                if figure is not None and name is not None and name in divided}
        found = here if found is None else {figure: n for figure, n in found.items() if here.get(figure) == n}
    return found or {}


def _rank_batch_count(divisor: cst.BaseExpression, loaders: set[str], batch_index: Optional[str],
                      assigned: dict[str, list[cst.BaseExpression]]) -> Optional[str]:
    """What the divisor counts, in words, when it is this rank's count: `len(loader)` batches
    (`len(loaders[phase])`), the batch loop's enumerate index `i` or `i + 1`, `len(loader.sampler)`
    samples (a sharding sampler hands each rank its share), or a name that only ever holds one
    of those (`num_batches = len(loader)` before the epoch loop)."""
    if batch_index is not None:
        if isinstance(divisor, cst.Name) and divisor.value == batch_index:
            return f"{batch_index} batches"
        if (isinstance(divisor, cst.BinaryOperation) and isinstance(divisor.operator, cst.Add)
                and isinstance(divisor.left, cst.Name) and divisor.left.value == batch_index
                and isinstance(divisor.right, cst.Integer) and divisor.right.value == "1"):
            return f"{batch_index} + 1 batches"
    if isinstance(divisor, cst.Name):
        values = assigned.get(divisor.value, [])
        counts = [_rank_batch_count(value, loaders, None, {}) for value in values]
        if counts and all(count is not None for count in counts):
            return f"{divisor.value} {str(counts[0]).rsplit(' ', 1)[-1]}"
        return None
    code = cst.Module(body=[]).code_for_node(divisor)
    if not (isinstance(divisor, cst.Call) and dotted_name(divisor.func) == "len" and divisor.args):
        # `math.ceil(len(loader) / accum_steps)` optimizer updates, `len(loader) * batch_size`:
        # a fixed function of this rank's count, which a sharding sampler makes the same on
        # every rank, so the ranks' sums over it average as over the count itself.
        inner = [call for call in calls_within(divisor) if call is not divisor and dotted_name(call.func) == "len"
                 and call.args and _rank_batch_count(call, loaders, None, {}) is not None]
        return f"{code}, counted from its batches" if inner and isinstance(
            divisor, (cst.Call, cst.BinaryOperation)) else None
    counted = divisor.args[0].value
    if isinstance(counted, cst.Attribute) and counted.attr.value == "sampler":
        return f"{code} samples" if dotted_name(counted.value) in loaders else None
    if isinstance(counted, cst.Subscript):  # `len(loaders[phase])`
        counted = counted.value
    return f"{code} batches" if dotted_name(counted) in loaders else None


# --- helpers ---------------------------------------------------------------------------------------

def _augmented_names(node: cst.CSTNode) -> set[str]:
    found: set[str] = set()
    for assign in find_all(node, cst.AugAssign):
        figure = figure_named(assign.target)
        if isinstance(assign.operator, cst.AddAssign) and figure is not None:
            found.add(figure)
    return found


_WARMUP_STEP = TRAINING.replace("for x, y in loader:", "for i, (x, y) in enumerate(loader):").replace(
    "        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()\n",
    "        optimizer.zero_grad()\n        loss.backward()\n        step = epoch * len(loader) + i\n"
    "        if step < 10:\n            optimizer.step()\n            continue\n        optimizer.step()\n")

CASES = (
    # A step decided on a counter every rank shares (batches done so far) is no divergence;
    # one decided on the rank's own loss is.
    Silent(_WARMUP_STEP, "DDP902"),
    Emits(_WARMUP_STEP.replace("step = epoch * len(loader) + i", "step = loss.item()"), "DDP902"),
    Emits(TRAINING.replace("for x, y in loader:", "for i, (x, y) in enumerate(loader):")
          .replace("        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()\n",
                   "        (loss / 4).backward()\n        if (i + 1) % 4 == 0:\n"
                   "            optimizer.step()\n            optimizer.zero_grad()\n"), "DDP401", ("no_sync()",)),
    Silent(TRAINING, "DDP401"),
    # An optimizer known by its value, whatever its name (`opt`, `solver`): its step is the step.
    Emits(TRAINING.replace("optimizer", "solver").replace("for x, y in loader:", "for i, (x, y) in enumerate(loader):")
          .replace("        solver.zero_grad()\n        loss.backward()\n        solver.step()\n",
                   "        (loss / 4).backward()\n        if (i + 1) % 4 == 0:\n"
                   "            solver.step()\n            solver.zero_grad()\n"), "DDP401", ("no_sync()",)),
    Emits(_WARMUP_STEP.replace("optimizer", "opt").replace("step = epoch * len(loader) + i", "step = loss.item()"),
          "DDP902"),
    # Accumulation in a method the `__main__` block drives: the group says whether to skip.
    Emits('''\
import torch
from torch.utils.data import DataLoader, TensorDataset


class Trainer:
    def __init__(self, model, loader):
        self.model, self.loader = model, loader
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)

    def epoch(self):
        for i, (x, y) in enumerate(self.loader):
            (torch.nn.functional.mse_loss(self.model(x), y) / 2).backward()
            if (i + 1) % 2 == 0:
                self.opt.step()
                self.opt.zero_grad()


if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    data = TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
    loader = DataLoader(data, batch_size=4, shuffle=True)
    trainer = Trainer(torch.nn.Linear(4, 1).to(device), loader)
    for _ in range(2):
        trainer.epoch()
''', "DDP401", ("not dist.is_initialized() else self.model.no_sync()",)),
    Emits(TRAINING.replace("    for x, y in loader:\n", "    total = 0.0\n    for x, y in loader:\n")
          .replace("        optimizer.step()\n    print(epoch, loss.item())\n",
                   "        optimizer.step()\n        total += loss.item()\n    print(epoch, total / len(loader))\n"),
          "DDP402", ("dist.all_reduce(",)),
    # A running figure kept in a zero tensor (`correct = torch.zeros(1)`) beside a Python count:
    # neither is summed (the ratio would mix this rank's hits with every rank's samples).
    Emits(TRAINING.replace("    for x, y in loader:\n",
                           "    correct, seen = torch.zeros(1), 0\n    for x, y in loader:\n")
          .replace("        optimizer.step()\n    print(epoch, loss.item())\n",
                   "        optimizer.step()\n        correct += (out > 0).sum()\n        seen += len(y)\n"
                   "    print(epoch, correct.item() / seen)\n")
          .replace("loss = ", "out = model(x)\n        loss = ", 1),
          "DDP407"),
    # The batch loop inside a `with` (autocast, a progress bar): summed once the `with` ends.
    Emits(TRAINING.replace("    for x, y in loader:\n", "    total = 0.0\n    with torch.autocast(\"cpu\"):\n"
                           "     for x, y in loader:\n")
          .replace("        optimizer.step()\n    print(epoch, loss.item())\n",
                   "        optimizer.step()\n        total += loss.item()\n    print(epoch, total / len(loader))\n"),
          "DDP402", ("dist.all_reduce(",)),
    # The mean of the batch means, divided in place: the same figure as `total / len(loader)`.
    Emits(TRAINING.replace("    for x, y in loader:\n", "    total = 0.0\n    for x, y in loader:\n")
          .replace("        optimizer.step()\n    print(epoch, loss.item())\n",
                   "        optimizer.step()\n        total += loss.item()\n    total /= len(loader)\n"
                   "    print(epoch, total)\n"),
          "DDP402", ("total = totals[0].item() / dist.get_world_size()",)),
    # The batch losses kept in a list: joined from every rank before their mean is taken.
    Emits(TRAINING.replace("    for x, y in loader:\n", "    losses = []\n    for x, y in loader:\n")
          .replace("        optimizer.step()\n    print(epoch, loss.item())\n",
                   "        optimizer.step()\n        losses.append(loss.item())\n"
                   "    print(epoch, sum(losses) / len(losses))\n"),
          "DDP402", ("every_rank(losses)",)),
    # Read by position, lined up with another per-batch list: left as this rank's.
    Silent(TRAINING.replace("    for x, y in loader:\n", "    losses, steps = [], []\n    for x, y in loader:\n")
           .replace("        optimizer.step()\n    print(epoch, loss.item())\n",
                    "        optimizer.step()\n        losses.append(loss.item())\n        steps.append(len(steps))\n"
                    "    print(epoch, steps[losses.index(min(losses))])\n"),
           "DDP402"),
    # Running figures kept in a dict's entries: each entry the loop adds to is summed.
    Emits(TRAINING.replace("    for x, y in loader:\n", "    stats = {'loss': 0.0, 'seen': 0}\n"
                           "    for x, y in loader:\n")
          .replace("        optimizer.step()\n    print(epoch, loss.item())\n",
                   "        optimizer.step()\n        stats['loss'] += loss.item()\n"
                   "        stats['seen'] += x.size(0)\n"
                   "    print(epoch, stats['loss'] / len(loader), stats['seen'])\n"),
          "DDP402", ('stats["loss"] = totals[0].item() / dist.get_world_size()', 'stats["seen"] = int(totals[1])')),
    # A meter whose class ddpify cannot read as a sum and a count: named, not guessed at.
    Emits(TRAINING.replace("for epoch in range(3):\n", "class Meter:\n    def update(self, value, n=1):\n"
                           "        self.last = max(value, getattr(self, 'last', value))\n\n\nfor epoch in range(3):\n")
          .replace("    for x, y in loader:\n", "    meter = Meter()\n    for x, y in loader:\n")
          .replace("        optimizer.step()\n    print(epoch, loss.item())\n",
                   "        optimizer.step()\n        meter.update(loss.item())\n    print(epoch, meter.avg)\n"),
          "DDP407"),
    # A time budget checked once per epoch: rank 0's clock decides for every rank.
    Emits(TRAINING.replace("import torch\n", "import time\n\nimport torch\n", 1)
          .replace("for epoch in range(3):\n", "start = time.time()\nfor epoch in range(3):\n")
          .replace("    print(epoch, loss.item())\n",
                   "    print(epoch, loss.item())\n    if time.time() - start > 3600:\n        break\n"),
          "DDP405", ("dist.broadcast(decision, src=0)",)),
)


def _no_device_bound(facts: Facts, setup: Plan) -> bool:
    """A device chosen in another module (`model = utils.cuda(Net())`) names no device here:
    the sums stay on the CPU, which the group (each device type's default backend) reduces
    with Gloo."""
    return setup.device_elsewhere and not facts.assigned_values.get(setup.device)
