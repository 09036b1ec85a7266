"""Batches cut by hand (`for i in range(0, n, batch_size): xb = x[i:i + batch_size]`): each
rank takes every N-th batch, the same number on every rank (DDP208, DDP217).

A DataLoader is not needed to shard: the loop's own range of batch starts is split between
the ranks, so plain `python` runs every batch as before. It is done only when every rank
holds the same data in the same order (a shuffle must come from a seeded generator) and no
batch hands state to the next (an RNN's hidden state carried through `bptt` chunks would
skip the chunks other ranks took); otherwise the loop stays reported (DDP208).
"""
from collections.abc import Sequence
from typing import Optional, Union

import libcst as cst

from ddpify.analysis import names, seeding, traversal
from ddpify.analysis.control import Facts, is_training_loader
from ddpify.analysis.nodes import calls_within, dotted_name, find_all, names_in, target_names
from ddpify.diagnostics import Rule, Severity
from ddpify.emit.edits import Edits
from ddpify.plan import Plan
from ddpify.rules import per_rank_stops, random_batches
from ddpify.rules.cases import TRAINING, Emits, Silent
from ddpify.rules.epochs import SHARDED_THERE

RULES = (
    Rule("DDP208", Severity.WARNING, "batches sliced by hand: every rank trains on the full data",
         "The loop cuts batches out of tensors itself, so no sampler can shard it; each rank "
         "would train on every sample and an epoch would do N times the work.",
         "Use a DataLoader over a TensorDataset, or shard the tensors by rank so that every "
         "rank runs the same number of batches (e.g. keep len(x) // world_size * world_size "
         "samples, then x[rank::world_size])."),
    Rule("DDP217", Severity.EDIT, "batches cut by hand: each rank takes every N-th batch",
         "The loop slices its batches out of tensors itself, so no sampler can shard it; its "
         "range of batch starts is split instead (rank_share), with the same number of "
         "batches on every rank so that no rank waits for a step the others skip. Every rank "
         "must hold the same data in the same order: a shuffle comes from a seeded generator.",
         "Nothing to do."),
)

HELPER = '''\


def rank_share(batch_starts):
    """This rank's batches: every N-th one, and the same number on every rank (the last
    few, which not every rank would get, are left out), so that no rank waits for a step
    the others never take."""
    if not dist.is_initialized():
        return batch_starts
    rank, world_size = dist.get_rank(), dist.get_world_size()
    return batch_starts[rank : len(batch_starts) // world_size * world_size : world_size]
'''
# Shuffles drawn from the global generator: alike on every rank only when the script seeds it.
SHUFFLES = frozenset({"torch.randperm", "random.shuffle", "numpy.random.permutation",
                      "numpy.random.shuffle"})


STRETCH_HELPER = '''\


def rank_stretch(data):
    """This rank's stretch of data batched by hand: its rows cut into equal contiguous parts,
    one per rank, so that every rank steps through its own part (a sequence stays in order
    for state carried from batch to batch) and all take the same number of steps."""
    if not dist.is_initialized():
        return data
    rank, world_size = dist.get_rank(), dist.get_world_size()
    rows = len(data) // world_size
    return data[rank * rows : (rank + 1) * rows]
'''


def stretch_sequences(facts: Facts, edits: Edits, setup: Plan, loop: cst.For) -> bool:
    """`for batch, i in enumerate(range(0, train_data.size(0) - 1, args.bptt))` with a hidden
    state carried from batch to batch: each rank takes its own contiguous stretch of
    `train_data`, right where it is made. False when the loop is not of that shape."""
    data = _data_ranged_over(loop)
    if data is None:
        return False
    statements = [statement for statement in facts.statements_touching.get(data, ())
                  if _assigns_name(statement, data)]
    if len(statements) != 1 or not facts.sees_value(loop, data, facts.function_of(statements[0])):
        return False
    if not _carried_from_batch_to_batch(loop):
        return False
    statement = statements[0]
    edits.insert_after(statement, [edits.statement(f"{data} = rank_stretch({data})\n")])
    edits.add_helper("rank_stretch", STRETCH_HELPER, "dist")
    setup.sharded_loops.append(loop)
    edits.report("DDP217", loop, STRETCH_SUMMARY.format(data=data))
    return True


STRETCH_SUMMARY = "sequence batched by hand: each rank takes its own stretch of `{data}`"


def _data_ranged_over(loop: cst.For) -> Optional[str]:
    """`X` in `range(0, X.size(0) - 1, step)` or `range(0, len(X), step)`, also inside enumerate()."""
    iterable = loop.iter
    if isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Name) and iterable.func.value == "enumerate":
        iterable = iterable.args[0].value if iterable.args else iterable
    if not (isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Name)
            and iterable.func.value == "range" and len(iterable.args) == 3):
        return None
    stop = iterable.args[1].value
    if isinstance(stop, cst.BinaryOperation):
        stop = stop.left
    if isinstance(stop, cst.Call) and isinstance(stop.func, cst.Name) and stop.func.value == "len" and stop.args:
        return _name(stop.args[0].value)
    if isinstance(stop, cst.Call) and isinstance(stop.func, cst.Attribute) and stop.func.attr.value in ("size",):
        return _name(stop.func.value)
    return None


def _name(node: cst.BaseExpression) -> Optional[str]:
    return node.value if isinstance(node, cst.Name) else None


def _assigns_name(statement, name: str) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 and isinstance(
        statement.body[0], cst.Assign) and any(
        isinstance(target.target, cst.Name) and target.target.value == name for target in statement.body[0].targets)


def plan(facts: Facts, edits: Edits, setup: Plan) -> None:
    for loop in facts.sliced_batch_loops:
        if loop not in facts.training_loops:
            continue
        reason = _why_not(facts, loop)
        if reason is not None:
            setup.hand_made_batches.append(edits.report("DDP208", loop, f"{RULE_SUMMARY}: {reason}"))
            continue
        edits.expressions[loop.iter] = _shared(edits)
        edits.add_helper("rank_share", HELPER, "dist")
        setup.sharded_loops.append(loop)
        edits.report("DDP217", loop)


RULE_SUMMARY = "batches sliced by hand: every rank trains on the full data"


def _why_not(facts: Facts, loop: cst.For) -> Optional[str]:
    if not isinstance(loop.iter, cst.Call) or any(arg.star for arg in loop.iter.args):
        return "the batch starts are not a plain range()"
    carried = _carried_from_batch_to_batch(loop)
    if carried:
        return (f"`{sorted(carried)[0]}` is carried from one batch to the next, so ranks cannot "
                "take batches out of order")
    seeded = seeding.seeded_anywhere(facts, "torch")
    shuffled = [call for qualified in sorted(SHUFFLES) for call in facts.calls_named.get(qualified, ())]
    if shuffled and not seeded:
        return (f"the data is shuffled at line {facts.line_of(shuffled[0])} without a seed, so "
                "each rank would shuffle differently; seed torch (torch.manual_seed) first")
    return None


def _carried_from_batch_to_batch(loop: cst.For) -> set[str]:
    """Names the loop body reads before it assigns them (`hidden = model(x, hidden)`), other
    than sums (`total += ...`)."""
    body = loop.body.body if isinstance(loop.body, cst.IndentedBlock) else ()
    assigned_in_body = set().union(set(), *(_assigned(statement) for statement in body))
    read_first, _ = _read_before_assigned(body, set())
    # A sum (`total_loss += loss.item()`, reset to 0 every few batches for the log) is the same
    # whatever batches it adds up: no state the next batch needs.
    summed = {name for update in find_all(loop.body, cst.AugAssign) for name in names_in(update.target)}
    return read_first & assigned_in_body - summed - names_in(loop.target)


def _read_before_assigned(statements: Sequence[cst.BaseStatement],
                          assigned: set[str]) -> tuple[set[str], set[str]]:
    """The names `statements` read before they assign them, in order, and the names bound
    after them on every path. An `if` is followed into its branches (`if step % n == 0:
    avg = total / n; print(avg)` reads `avg` after assigning it): each branch starts from
    what was bound above it, and after the `if` a name counts as bound only when every
    branch binds it. Other compound statements are read as a whole."""
    read: set[str] = set()
    bound = set(assigned)
    for statement in statements:
        branches = _branches(statement)
        if branches is None:
            read |= _read(statement) - bound
            bound |= _assigned(statement)
            continue
        tests, blocks = branches
        read |= set().union(set(), *(names_in(test) for test in tests)) - bound
        after: Optional[set[str]] = None
        for block in blocks:
            block_read, block_bound = _read_before_assigned(block, bound)
            read |= block_read
            after = block_bound if after is None else after & block_bound
        bound = after if after is not None else bound
    return read, bound


def _branches(statement: cst.BaseStatement) -> Optional[tuple[list[cst.BaseExpression],
                                                                list[Sequence[cst.BaseStatement]]]]:
    """An `if` / `elif` / `else` chain with indented blocks: its tests and its blocks (an
    empty block for a missing `else`); None for any other statement."""
    tests: list[cst.BaseExpression] = []
    blocks: list[Sequence[cst.BaseStatement]] = []
    current: Optional[Union[cst.If, cst.Else]] = statement if isinstance(statement, cst.If) else None
    if current is None:
        return None
    while isinstance(current, cst.If):
        if not isinstance(current.body, cst.IndentedBlock):
            return None
        tests.append(current.test)
        blocks.append(current.body.body)
        current = current.orelse
    if current is None:
        blocks.append(())
    elif isinstance(current.body, cst.IndentedBlock):
        blocks.append(current.body.body)
    else:
        return None
    return tests, blocks


def _assigned(statement: cst.CSTNode) -> set[str]:
    """Names a statement binds with `=` (a sum's `+=` carries nothing a rank needs)."""
    found: set[str] = set()

    class _Targets(cst.CSTVisitor):
        def visit_AssignTarget(self, target: cst.AssignTarget) -> None:
            if isinstance(target.target, (cst.Name, cst.Tuple, cst.List)):
                found.update(names_in(target.target))

    traversal.visit(statement, _Targets())
    return found


def _read(statement: cst.CSTNode) -> set[str]:
    if isinstance(statement, cst.SimpleStatementLine):
        read: set[str] = set()
        for small in statement.body:
            read |= names_in(small.value) if isinstance(small, cst.Assign) and small.value else names_in(small)
        return read
    return names_in(statement)


def _shared(edits: Edits):
    def rewrite(starts: cst.BaseExpression) -> cst.BaseExpression:
        return cst.Call(func=cst.Name("rank_share"), args=[cst.Arg(value=starts)])

    return rewrite


def loader_in_a_container(facts: Facts, loop: cst.For) -> Optional[cst.Call]:
    """`for x, y in dataloaders[phase]:` where `dataloaders = {split: DataLoader(...) ...}`:
    the DataLoader call inside the value the loop iterates."""
    loader_calls = set(facts.loader_calls)
    for name, loops in facts.loops_over.items():
        if loop not in loops:
            continue
        for value in facts.assigned_values.get(name, ()):
            inside = [call for call in calls_within(value) if call in loader_calls]
            if inside and value not in loader_calls:
                return inside[0]
    return None


def _names_counted_by_range(loop: cst.For) -> set[str]:
    """The bounds the loop counts with, given to its `range(...)` as they are (`for epoch in
    range(start_epoch, epochs)`, `start_epoch` from a resume helper): numbers, not data, so
    what made them is not where the batches come from. (`range(0, len(X), bs)` reads X's
    length: X stays a source.)"""
    iterable = loop.iter
    if not isinstance(iterable, cst.Call) or dotted_name(iterable.func) != "range":
        return set()
    bounds = (dotted_name(arg.value) for arg in iterable.args)
    return {bound for bound in bounds if bound is not None}


def only_hand_made_batches(facts: Facts, plan: Plan) -> bool:
    """No training loop is fed by a DataLoader ddpify can shard, and some train on data built
    by hand or on loaders kept in a dict: the file stays single-process (DDP904) rather than
    N ranks repeating the same work."""
    sharded = plan.loaders_given_a_sampler or plan.sharded_loader_dicts
    return bool(plan.hand_made_batches) and not sharded and not any(
        is_training_loader(facts, loader) for loader in facts.loaders)


def report_batch_loops(facts: Facts, edits: Edits, setup: Plan) -> None:
    """Training loops that iterate no DataLoader: stretched sequences and random indices are
    sharded by their own rules; the rest are reported with what feeds them (DDP208, DDP218)."""
    reported: set[cst.Call] = set()
    for loop in facts.batch_loops_without_loader():
        if loop in facts.sliced_batch_loops or loop in setup.loader_dict_loops:
            continue  # sharded above (plan), or by loader_dicts.py
        if per_rank_stops.report_stop_per_rank(facts, edits, setup, loop):
            continue
        if stretch_sequences(facts, edits, setup, loop):
            continue
        if random_batches.seed_per_rank(facts, edits, setup, loop):
            continue
        contained = loader_in_a_container(facts, loop)
        if contained is not None:
            if contained not in reported:
                reported.add(contained)
                handed_to = facts.call_taking(contained)
                if handed_to is None:
                    setup.hand_made_batches.append(edits.report("DDP218", contained))
                else:
                    setup.hand_made_batches.append(edits.report("DDP210", contained, (
                        f"training loader built inside `{edits.code(handed_to.func)}(...)`, with no name "
                        "ddpify can follow to its epochs: name it first (`train_loader = DataLoader(...)`, "
                        f"then `{edits.code(handed_to.func)}(train_loader)`) and run ddpify again")))
            continue
        pick = facts.phase_picks().get(loop)
        if pick is not None and facts.enclosing_loops(pick.phase_loop):
            # `loader = train_loader` in the training phase: the pass is a shard when the
            # loader picked is (its set_epoch is epochs.py's, at the top of the epoch loop).
            setup.partly_sharded_loops.setdefault(loop, SHARDED_THERE.format(loader=pick.alias))
            continue
        setup.hand_made_batches.append(edits.report("DDP208", loop, _what_feeds(facts, edits, loop)))
    _report_batches_handed_to_training(facts, edits, setup)
    _report_full_batch_steps(facts, edits, setup)


def _what_feeds(facts: Facts, edits: Edits, loop: cst.For) -> str:
    """The DDP208 message for a training loop over no DataLoader ddpify follows: what feeds
    its batches, and the fix for that source."""
    counts = _names_counted_by_range(loop)
    made_by = next((facts.made_in_other_modules[name] for name in facts.names_iterated_by(loop)
                    if name in facts.made_in_other_modules and name not in counts), None)
    if made_by is not None:
        return (f"batches come from `{made_by}()` in another module of the project, "
                "which hands out no DataLoader ddpify can follow (one returned alone, by name, in a "
                "tuple or in a dict): every rank trains on the same data; return the DataLoader "
                "itself, or give it a DistributedSampler there")
    unread = _made_by_unread_import(facts, loop)
    if unread is not None:
        return (f"batches come from `{unread}()`, imported from a module ddpify does not "
                "read: every rank trains on the same data; give its DataLoader a DistributedSampler "
                "there, or make that import one ddpify can follow")
    builder = _loader_builder_feeding(facts, loop)
    if builder is not None:
        return (f"batches come from the DataLoaders `{builder}()` builds, handed here in "
                "a form ddpify cannot follow (a dict or list made anew in a loop, or one that several "
                "calls share): every rank trains on the same data; build the training loader by name "
                "where its epochs are counted, or give it a DistributedSampler and set_epoch by hand")
    environment = _environment_made(facts)
    if environment is not None:
        return (f"batches come from an environment (`{edits.code(environment.func)}` at line "
                f"{facts.line_of(environment)}) the loop plays, not from data to shard: under DDP each rank "
                "would play its own episodes (seed each rank's environment differently) and every rank "
                "must take the same number of optimizer steps; keep it single-process, or write that by hand")
    alias = _loader_picked_per_phase(facts, loop)
    if alias is not None:
        name, picked = alias
        return (f"batches come from `{name}`, assigned {picked} per phase (the phase loop "
                "of a fine-tuning tutorial): ddpify cannot tell which pass trains, nor gather the "
                "figures of the one that evaluates; "
                "loop over the loaders themselves (`for x, y in loaders[phase]:` over a dict "
                "`{\"train\": train_loader, \"val\": val_loader}`) and run ddpify again")
    return "batches built by hand: every rank trains on the same data; shard it by rank (e.g. data[rank::world_size])"


def _loader_picked_per_phase(facts: Facts, loop: cst.For) -> Optional[tuple[str, str]]:
    """Rule: `loader = train_loader` in one branch and `loader = val_loader` in the other (or
    `loader = train_loader if phase == "train" else val_loader`, `loader = loaders[phase]`),
    then `for x, y in loader`: every value the name is assigned in the loop's function is a
    DataLoader or an entry of a dict of them, and not always the same one. The loop goes over
    several loaders, and which of its passes train is decided by the phase: the loaders stay
    as they are and the report names the spelling ddpify shards (a loop over `loaders[phase]`)."""
    loader_names = {loader.name for loader in facts.loaders}
    dict_names = {loader_dict.name for loader_dict in facts.loader_dicts()}
    function = facts.function_of(loop)
    for name in facts.names_iterated_by(loop):
        values = [value for value in facts.assigned_values.get(name, ()) if facts.function_of(value) is function]
        picked = [_loader_references(value, loader_names, dict_names) for value in values]
        if not values or any(references is None for references in picked):
            continue
        distinct = list(dict.fromkeys(code for references in picked if references for code in references))
        if len(distinct) > 1 or any(code.endswith("[...]") for code in distinct):
            return name, " or ".join(f"`{code}`" for code in distinct)
    return None


def _loader_references(value: cst.BaseExpression, loader_names: set[str],
                       dict_names: set[str]) -> Optional[list[str]]:
    """`train_loader` (a DataLoader's name), `loaders[phase]` (an entry of a dict of them), or
    a conditional expression choosing between such; None for anything else."""
    if isinstance(value, cst.IfExp):
        body = _loader_references(value.body, loader_names, dict_names)
        orelse = _loader_references(value.orelse, loader_names, dict_names)
        return None if body is None or orelse is None else body + orelse
    if isinstance(value, cst.Name) and value.value in loader_names:
        return [value.value]
    if isinstance(value, cst.Subscript) and dotted_name(value.value) in dict_names:
        return [f"{dotted_name(value.value)}[...]"]
    return None


# Calls that make a reinforcement-learning environment, whose episodes are the training data.
ENVIRONMENT_MAKERS = ("gym.make", "gymnasium.make", "gym.vector.make", "gymnasium.vector.make",
                      "gymnasium.make_vec", "gym.vector.SyncVectorEnv", "gymnasium.vector.SyncVectorEnv",
                      "gym.vector.AsyncVectorEnv", "gymnasium.vector.AsyncVectorEnv")


def _environment_made(facts: Facts) -> Optional[cst.Call]:
    """The first call of the file that makes a gym / gymnasium environment."""
    made = [call for qualified in ENVIRONMENT_MAKERS for call in facts.calls_named.get(qualified, ())]
    return min(made, key=facts.start_of, default=None)


def _report_batches_handed_to_training(facts: Facts, edits: Edits, setup: Plan) -> None:
    """Rule: batches that another module of the project makes by hand (a generator, or an
    iterator class of its own: `train_iter = build_iterator(data, config)` returning a
    `DatasetIterater`), handed to the project's training function or Trainer
    (`train(model, train_iter)`), are no DataLoader: nothing gives them a sampler, so every
    rank would train on the same batches. Reported at the call (DDP208), and a file that
    shards no other training loader stays single-process (DDP904). Only what that function or
    Trainer loops over counts (a `dev_iter` it hands on to its evaluation does not)."""
    for call in [*facts.training_helper_calls, *facts.training_constructors]:
        for value in facts.iterated_arguments.get(call, ()):
            name = dotted_name(value)
            made_by = facts.batches_made_in_other_modules.get(name) if name is not None else None
            if made_by is None:
                continue
            setup.hand_made_batches.append(edits.report(
                "DDP208", call, f"`{name}` handed to `{edits.code(call.func)}(...)` is batches that "
                f"`{made_by.rpartition('.')[2]}()` of another module of the project makes by hand, "
                "no DataLoader: every rank would train on the same batches; build a DataLoader over "
                "the data (ddpify shards it), or take this rank's share there "
                "(data[rank::world_size])"))


def _report_full_batch_steps(facts: Facts, edits: Edits, setup: Plan) -> None:
    """Rule: training whose steps run in no loop at all, in a file that builds no DataLoader
    (`loss = optimizer.step(closure)` of L-BFGS over the whole tensors, its iterations the
    optimizer's own max_iter; in a function or in a Trainer's method; or such closure steps
    repeated by a while loop, with no batch drawn per step), trains on the full
    data at once: every rank would repeat the same work on the same data, as with batches
    built by hand (DDP208), and the file stays single-process (DDP904). Not in a helper
    module of a project: its step runs in a loop of the module that calls it; nor where no
    optimizer steps (`out.backward()` to show a gradient)."""
    if facts.library or facts.unseen_callers:
        return  # a step another module calls, from its own loop
    if facts.training_loops or facts.loader_calls or facts.external_loaders or facts.training_helper_calls:
        return
    steps = [call for call in facts.training_calls
             if isinstance(call.func, cst.Attribute) and call.func.attr.value == "step"]
    # `while loss > tol: optimizer.step(closure)`: the closure re-reads the same whole data.
    closures_only = bool(steps) and all(step.args for step in steps)
    if not closures_only and _report_steps_repeated_by_while(facts, edits, setup):
        return
    if not facts.training_calls or any(_in_a_loop(facts, call, closures_only) for call in facts.training_calls):
        return
    if not steps:
        return  # backward() alone takes no step: an autograd demo, not training on the data
    step = steps[0]
    setup.hand_made_batches.append(edits.report(
        "DDP208", step, "the whole data in each step (full-batch training, no batch loop): every rank "
        "would train on the same data; shard it by rank (e.g. data[rank::world_size]), or keep it "
        "on one process"))


def _report_steps_repeated_by_while(facts: Facts, edits: Edits, setup: Plan) -> bool:
    """Rule: training steps that only a `while` loop repeats (`while reward_avg < 1.0:` around
    playing an episode and learning from it, `while step < max_steps:` around a get_batch()),
    in a file with no for loop that trains and no DataLoader, take batches no sampler shards,
    and each rank's test of the loop decides how many steps it takes: a test on this rank's
    own rewards or losses stops one rank while the others wait in the next all-reduce (on
    NCCL, a hang). Neither can be shown safe here: reported at the loop (DDP208), the file
    stays single-process (DDP904). True when reported."""
    loops = [loop for loop in (_while_around(facts, call) for call in facts.training_calls) if loop is not None]
    if not loops:
        return False
    loop = min(loops, key=facts.start_of)
    environment = _environment_made(facts)
    source = (f"an environment (`{edits.code(environment.func)}` at line {facts.line_of(environment)}) "
              "the loop plays" if environment is not None else "what the loop builds or plays itself")
    setup.hand_made_batches.append(edits.report("DDP208", loop, (
        f"training steps repeated by a `while` loop (`while {edits.code(loop.test)}:`) over no "
        f"DataLoader: its batches come from {source}, which no sampler shards, and ddpify cannot "
        "show that the loop's test stops every rank at the same step (a rank that stops first "
        "leaves the others waiting in an all-reduce); keep it single-process, or shard the batches "
        "by rank and stop every rank on one decision (rank 0's, dist.broadcast) by hand")))
    return True


def _while_around(facts: Facts, node: cst.CSTNode, depth: int = 0) -> Optional[cst.While]:
    """The innermost while loop around `node` in its own function, or around a call of that
    function (a few calls up); None where a for loop comes first or there is no loop."""
    parent = facts.parents.get(node)
    while parent is not None and not isinstance(parent, cst.FunctionDef):
        if isinstance(parent, cst.For):
            return None
        if isinstance(parent, cst.While) and facts.ancestor_in(node, parent.body) is not None:
            return parent
        parent = facts.parents.get(parent)
    if parent is None or depth > 3:
        return None
    return next((loop for loop in (_while_around(facts, call, depth + 1) for call in facts.calls_of(parent))
                 if loop is not None), None)


def _in_a_loop(facts: Facts, node: cst.CSTNode, for_only: bool, depth: int = 0) -> bool:
    """Inside a for loop (or a while loop, unless for_only), in its own function or around a
    call of that function."""
    loops = (cst.For,) if for_only else (cst.For, cst.While)
    parent = facts.parents.get(node)
    while parent is not None and not isinstance(parent, cst.FunctionDef):
        if isinstance(parent, loops):
            return True
        parent = facts.parents.get(parent)
    if parent is None or depth > 3:
        return False
    return any(_in_a_loop(facts, call, for_only, depth + 1) for call in facts.calls_of(parent))


_UNWRAPPING = ("enumerate", "tqdm", "iter")


def _loader_builder_feeding(facts: Facts, loop: cst.For) -> Optional[str]:
    """The function of this file, one that builds DataLoaders, whose result the loop goes
    over through a subscript or unwrapping (`loaders = make_loaders()` ... `for x, y in
    loaders["train"]`): the batches are no hand-made ones."""
    iterated: cst.BaseExpression = loop.iter
    while True:
        if isinstance(iterated, cst.Subscript):
            iterated = iterated.value
        elif isinstance(iterated, cst.Call) and iterated.args and dotted_name(iterated.func) in _UNWRAPPING:
            iterated = iterated.args[0].value
        else:
            break
    name = dotted_name(iterated)
    loader_calls = set(facts.loader_calls)
    for value in facts.assigned_values.get(name, []) if name is not None else []:
        callee = dotted_name(value.func) if isinstance(value, cst.Call) else None
        function = facts.functions.get(callee) if callee is not None else None
        if function is not None and any(call in loader_calls for call in calls_within(function)):
            return callee
    return None


def _made_by_unread_import(facts: Facts, loop: cst.For) -> Optional[str]:
    """The imported function (`TCN.mnist_pixel.utils.data_generator`, found through an import
    ddpify cannot follow, or a library's) whose result the loop goes over: the batches come
    from there, not from code built by hand here."""
    iterated = set(facts.names_iterated_by(loop)) - _names_counted_by_range(loop)
    # (`train_loader, test_loader = data_generator(...)` unpacks: read the assignments.)
    values = [assign.value for assign in facts.nodes_of(cst.Assign)
              if any(target_names(target.target) & iterated for target in assign.targets)]
    qualified_of = {call: qualified for qualified, calls in facts.calls_named.items() for call in calls}
    for value in values:
        value = _source_inside(value, qualified_of)
        if isinstance(value, cst.Call):
            written = dotted_name(value.func)
            qualified = qualified_of.get(value)
            if qualified is not None and qualified != written and "." in qualified and not qualified.startswith(
                    ("torch.", "builtins.")) and qualified not in names.PROGRESS_BARS:
                return qualified
    return None


# What hands on the items of its first argument: the batches come from that argument.
PASSING_ON = frozenset({"builtins.iter", "builtins.enumerate"}) | names.PROGRESS_BARS


def _source_inside(value: cst.BaseExpression, qualified_of: dict[cst.Call, str]) -> cst.BaseExpression:
    """Rule: `iter(make_batches(...))`, `tqdm(make_batches(...))`, `enumerate(...)`: the batches
    come from the call inside; a progress bar over a count (`trange(steps)`, the loop's step
    counter while `next(data_iterator)` draws the batches) is no source of batches."""
    while isinstance(value, cst.Call) and qualified_of.get(value) in PASSING_ON and value.args \
            and value.args[0].keyword is None and not value.args[0].star:
        value = value.args[0].value
    return value


CASES = (
    Emits(TRAINING.replace("    for x, y in loader:\n", "    for x, y in [(inputs, targets)]:\n")
          .replace("dataset = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))\n"
                   "loader = DataLoader(dataset, batch_size=8, shuffle=True)\n",
                   "inputs, targets = torch.randn(64, 4), torch.randn(64, 1)\n"), "DDP208"),
    Emits(TRAINING.replace("    for x, y in loader:\n",
                           "    for i in range(0, 64, 8):\n        x, y = inputs[i:i + 8], targets[i:i + 8]\n")
          .replace("dataset = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))\n"
                   "loader = DataLoader(dataset, batch_size=8, shuffle=True)\n",
                   "inputs, targets = torch.randn(64, 4), torch.randn(64, 1)\n"), "DDP217", ("rank_share(",)),
    Silent(TRAINING, "DDP217"),
    # A dict of loaders made anew each epoch by a function of the file: named as the source.
    Emits(TRAINING.replace("loader = DataLoader(dataset, batch_size=8, shuffle=True)\n",
                           'def make_loaders():\n'
                           '    return {"train": DataLoader(dataset, batch_size=8, shuffle=True)}\n')
          .replace("    for x, y in loader:\n", '    loaders = make_loaders()\n    for x, y in loaders["train"]:\n'),
          "DDP208"),
    # One L-BFGS step over the whole tensors, in no loop: full-batch.
    Emits("""\
import torch

model = torch.nn.Linear(4, 1)
x, y = torch.randn(64, 4), torch.randn(64, 1)
optimizer = torch.optim.LBFGS(model.parameters(), max_iter=20)


def closure():
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    return loss


optimizer.step(closure)
""", "DDP208"),
    # A PGD attack in a helper (the input perturbation stepped from its own gradient and fed
    # to the model), called in the pass over the loader: no training loop of its own.
    Silent(TRAINING.replace("for epoch in range(3):\n", """\
def attack(model, x, y, steps=3):
    delta = torch.zeros_like(x, requires_grad=True)
    for _ in range(steps):
        torch.nn.functional.mse_loss(model(x + delta), y).backward()
        delta.data = (delta + 0.01 * delta.grad.sign()).clamp(-0.1, 0.1)
        delta.grad.zero_()
    return delta.detach()


for epoch in range(3):
""").replace("model(x.to(device))", "model(x.to(device) + attack(model, x.to(device), y.to(device)))"), "DDP208"),
    # ...nor when an optimizer over the perturbation alone steps it (TRADES' l2 attack).
    Silent(TRAINING.replace("for epoch in range(3):\n", """\
def attack(model, x, y, steps=3):
    delta = 0.001 * torch.randn_like(x)
    delta.requires_grad_()
    optimizer_delta = torch.optim.SGD([delta], lr=0.01)
    for _ in range(steps):
        adv = x + delta
        optimizer_delta.zero_grad()
        (-torch.nn.functional.mse_loss(model(adv), y)).backward()
        optimizer_delta.step()
        delta.data.clamp_(-0.1, 0.1)
    return delta.detach()


for epoch in range(3):
""").replace("model(x.to(device))", "model(x.to(device) + attack(model, x.to(device), y.to(device)))"), "DDP208"),
    # ...but one that stops early when every example is fooled runs a per-rank number of
    # backwards through the DDP model, each a collective: its exit stays reported.
    Emits(TRAINING.replace("for epoch in range(3):\n", """\
def attack(model, x, y, steps=3):
    delta = torch.zeros_like(x, requires_grad=True)
    for _ in range(steps):
        error = torch.nn.functional.mse_loss(model(x + delta), y)
        if error.item() > 1.0:
            break
        error.backward()
        delta.data = (delta + 0.01 * delta.grad.sign()).clamp(-0.1, 0.1)
        delta.grad.zero_()
    return delta.detach()


for epoch in range(3):
""").replace("model(x.to(device))", "model(x.to(device) + attack(model, x.to(device), y.to(device)))"), "DDP902"),
    # A model of bare tensors stepped by hand in a loop of its own still trains there.
    Emits("""\
import torch

x, y = torch.randn(64, 4), torch.randn(64)
w = torch.zeros(4, requires_grad=True)
for step in range(20):
    loss = (torch.mv(x, w) - y).pow(2).mean()
    loss.backward()
    with torch.no_grad():
        w.data = w - 0.1 * w.grad
        w.grad.zero_()
""", "DDP208"),
)
