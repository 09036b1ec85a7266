"""sampler.set_epoch(epoch) where each new pass over a sharded loader begins (DDP202, DDP211)."""
from collections.abc import Callable, Iterator
from typing import Optional, Union, cast

import libcst as cst

from ddpify.analysis.call_modes import evaluating_call
from ddpify.analysis.control import Facts
from ddpify.analysis.facts import BlockItem, ExternalLoader, Loader, Statement
from ddpify.analysis.nodes import (
    argument_for,
    assigned_names,
    calls_within,
    dotted_name,
    find_all,
    names_within,
    parameter_names,
    positional_parameters,
)
from ddpify.analysis.values import literal_entry
from ddpify.diagnostics import Rule, Severity
from ddpify.emit.edits import Edits, Insertion
from ddpify.plan import Plan
from ddpify.rules.cases import TRAINING, Emits, Silent

RULES = (
    Rule("DDP202", Severity.EDIT, "sampler.set_epoch(epoch) at the top of the epoch loop",
         "DistributedSampler seeds its shuffle with the epoch; without set_epoch every epoch "
         "repeats the same order.",
         "Nothing to do."),
    Rule("DDP211", Severity.WARNING, "no epoch loop found for set_epoch",
         "DistributedSampler shuffles with a seed derived from the epoch; without "
         "set_epoch(epoch) every epoch repeats the same order.",
         "Call sampler.set_epoch(epoch) at the start of every epoch."),
    Rule("DDP220", Severity.INFO, "sharded loader passed over once: there is no epoch to set",
         "The training loader is iterated once, through one iterator made outside every loop "
         "(`itertools.cycle(loader)`, which replays the batches of its first pass, or "
         "`iter(loader)` never restarted). Its sampler draws one order, epoch 0's, as the "
         "original's drew one; set_epoch would change nothing.",
         "Nothing to do. To reshuffle between passes, restart the iterator "
         "(`except StopIteration: sampler.set_epoch(...); it = iter(loader)`)."),
)

SET_EPOCH_CODE = "if {sampler} is not None:\n    {sampler}.set_epoch({epoch})\n"


# A RandomSampler kept for plain `python` has no set_epoch.
SET_EPOCH_IF_DISTRIBUTED_CODE = "if distributed:\n    {sampler}.set_epoch({epoch})\n"


SET_EPOCH_VIA_LOADER_CODE = (
    "if isinstance({loader}.sampler, DistributedSampler):\n    {loader}.sampler.set_epoch({epoch})\n"
)


# A loader another module builds (or a value wrapping it): its sampler is a
# DistributedSampler only when distributed, and it may have no sampler at all.
SET_EPOCH_EXTERNAL_CODE = (
    'if isinstance(getattr({loader}, "sampler", None), DistributedSampler):\n'
    "    {loader}.sampler.set_epoch({epoch})\n"
)


# The test under which a pass over a loader another module builds is a shard.
SHARDED_THERE = 'isinstance(getattr({loader}, "sampler", None), DistributedSampler)'


def plan_external(facts: Facts, edits: Edits, setup: Plan) -> None:
    """set_epoch for the loaders that another module of the project builds and shards, where
    this module starts each pass over them. The epoch figures of a training pass over one are
    its rank's share when that module gave it a DistributedSampler: summed across ranks under
    that test (SHARDED_THERE, training.py)."""
    for loader in facts.external_loaders:
        holders = facts.holders_from(loader.function, loader.name)
        for loop in facts.loops_over_values(holders):
            iterated = [name for name in facts.names_iterated_by(loop) if (facts.function_of(loop), name) in holders
                        or (None, name) in holders]
            if iterated and facts.loop_trains(loop) and loop not in setup.partly_sharded_loops:
                name = iterated[0]
                if _before_the_progress_bar(facts, loop, name) is not loop:
                    # `data_loader = tqdm(data_loader)`: after the loop the name holds the bar,
                    # whose `iterable` is the loader.
                    name = f'getattr({name}, "iterable", {name})'
                setup.partly_sharded_loops[loop] = SHARDED_THERE.format(loader=name)
        if facts.calls_by_callee.get(f"{loader.name}.sampler.set_epoch"):
            continue  # its epoch is set already (this module was migrated before)
        trains = any(facts.loop_trains(loop) for loop in facts.loops_over_values(holders))
        if trains or handed_to_project_training(facts, loader.function, loader.name):
            before = sum(diagnostic.code == "DDP202" for diagnostic in edits.diagnostics)
            set_epoch(facts, edits, loader, f"{loader.name}.sampler", SET_EPOCH_EXTERNAL_CODE)
            if sum(diagnostic.code == "DDP202" for diagnostic in edits.diagnostics) > before:
                edits.imports.add("DistributedSampler")  # (the code set_epoch wrote names it)


def plan_external_in_place(facts: Facts, edits: Edits, setup: Plan) -> None:
    """`for x, y in data.get_loader("train", bs):` inside an epoch loop: the other module makes
    (and, by look, shards) a new loader each epoch, whose sampler starts at epoch 0 every time.
    The loader is named just before the pass, so that its epoch can be set and the pass's
    figures summed under the test that it is sharded; a pass outside any epoch loop, or one
    that does not train, is left as it is."""
    for loop, loader in facts.external_inline_loaders.items():
        if not facts.loop_trains(loop):
            continue
        epoch_loop = next((outer for outer in facts.enclosing_loops(loop) if epoch_counter(outer)), None)
        if epoch_loop is None:
            continue
        name = facts.free_name("train_loader")
        epoch = cast(str, epoch_counter(epoch_loop))
        code = f"{name} = {edits.code(loader.call)}\n" + SET_EPOCH_EXTERNAL_CODE.format(loader=name, epoch=epoch)
        edits.insert_before(loop, Insertion(edits.statements(code)))
        edits.expressions[cast(cst.Call, loader.call)] = _named(name)
        edits.imports.add("DistributedSampler")
        setup.partly_sharded_loops[loop] = SHARDED_THERE.format(loader=name)
        edits.report("DDP202", epoch_loop)


def epoch_counter(loop: cst.For) -> Optional[str]:
    """The name that counts the loop's passes, for set_epoch: its target (`for epoch in
    range(n)`), or the count enumerate hands out over a count (`for idx, epoch in
    enumerate(range(1, n + 1))`, `for i, epoch in enumerate(tqdm(range(n)))`): an int that
    grows by one each pass. None for any other loop (`for i, (x, y) in enumerate(loader)` is
    a pass over batches, never an epoch loop). An attribute of the object over a count counts
    as well (`for self.epoch in range(self.opt.num_epochs): self.run_epoch()`, monodepth2's
    trainer): set_epoch reads it where the loop binds it. (Over anything else, `for
    self.task in self.tasks`, it may hold no int.)"""
    if isinstance(loop.target, cst.Name):
        return loop.target.value
    if isinstance(loop.target, cst.Attribute) and isinstance(loop.target.value, cst.Name):
        return dotted_name(loop.target) if _over_a_count(loop.iter) else None
    counted = loop.iter
    if not (isinstance(loop.target, cst.Tuple) and len(loop.target.elements) == 2
            and isinstance(counted, cst.Call) and dotted_name(counted.func) == "enumerate" and counted.args):
        return None
    counter = loop.target.elements[0].value
    return counter.value if _over_a_count(counted.args[0].value) and isinstance(counter, cst.Name) else None


def _over_a_count(iterated: cst.BaseExpression) -> bool:
    """`range(...)`, `trange(...)` or a progress bar around either."""
    inner = iterated
    while isinstance(inner, cst.Call) and inner.args and (dotted_name(inner.func) or "").split(".")[-1] == "tqdm":
        inner = inner.args[0].value
    return isinstance(inner, cst.Call) and (dotted_name(inner.func) or "").split(".")[-1] in ("range", "trange")


def _through_a_wrapper(facts: Facts, epoch_loop: cst.For, name_there: str) -> str:
    """Rule: a loader handed to a class of the file that keeps it on `self` and iterates it in
    `__iter__` (`train_dl = WrappedDataLoader(train_dl, preprocess)`, a `DeviceDataLoader`) is
    still the loader, one attribute down: where a wrapper may reach the epoch loop, set_epoch
    goes through that attribute (`getattr(train_dl, "dl", train_dl).sampler`), or it would find
    no sampler on the wrapper and the shuffle would repeat every epoch."""
    function = facts.function_of(epoch_loop)
    for class_name, attribute in loader_wrappers(facts.module).items():
        for call in facts.calls_by_callee.get(class_name, ()):
            made_in = facts.function_of(call)
            for name, values in facts.assigned_values.items():
                if call in values and (function, name_there) in facts.holders_from(made_in, name):
                    return f'getattr({name_there}, "{attribute}", {name_there})'
    return name_there


def loader_wrappers(module: cst.Module) -> dict[str, str]:
    """The classes of the file whose `__iter__` loops over `self.<attribute>` that `__init__`
    sets from one of its parameters: class name -> attribute."""
    found: dict[str, str] = {}
    for statement in module.body:
        if not isinstance(statement, cst.ClassDef):
            continue
        methods = {method.name.value: method for method in statement.body.body if isinstance(method, cst.FunctionDef)}
        if "__iter__" not in methods or "__init__" not in methods:
            continue
        parameters = parameter_names(methods["__init__"])
        kept = {dotted_name(target.target): dotted_name(assign.value)
                for assign in find_all(methods["__init__"].body, cst.Assign) for target in assign.targets}
        for loop in find_all(methods["__iter__"].body, cst.For):
            iterated = dotted_name(loop.iter) or ""
            if iterated.startswith("self.") and kept.get(iterated) in parameters:
                found[statement.name.value] = iterated[len("self."):]
    return found


def runs_again(facts: Facts, loop: cst.For, loader_function: Optional[cst.FunctionDef]) -> bool:
    """The epoch loop sits in a function other than the loader's that is called more than once,
    or from inside a loop, and counts from a fixed start (`range(epochs)`, `range(1, n + 1)`):
    each call would count the same epochs again on the same sampler. A loop from a start it is
    handed (`range(start_epoch, epochs)`, a resume) keeps its numbers."""
    function = facts.function_of(loop)
    if function is None or function is loader_function:
        return False
    counted = loop.iter
    while isinstance(counted, cst.Call) and (dotted_name(counted.func) or "").split(".")[-1] in ("tqdm", "enumerate"):
        if not counted.args:
            return False
        counted = counted.args[0].value
    if not (isinstance(counted, cst.Call) and (dotted_name(counted.func) or "").split(".")[-1] in ("range", "trange")
            and counted.args and (len(counted.args) == 1 or isinstance(counted.args[0].value, cst.Integer))):
        return False
    calls = facts.calls_of(function)
    return len(calls) > 1 or any(facts.enclosing_loops(call) for call in calls)


def _repeated_by_an_outer_loop(facts: Facts, loop: cst.For, loader: Loader) -> bool:
    """Rule: `for run in range(3):` (a sweep, a fold, a restart of the model) around the epoch
    loop, in the loader's own function, and the loader built before that outer loop: every
    time round, the epoch loop would count 0, 1, ... again on the same sampler and replay the
    orders of the run before. Its epochs count on from the sampler's own instead. A loader
    built inside the outer loop has a fresh sampler each time round, starting at epoch 0."""
    if facts.function_of(loop) is not loader.function or loader.inline is not None:
        return False
    built_in = set(facts.enclosing_loops(loader.call))
    return any(outer not in built_in and outer is not loop for outer in facts.enclosing_loops(loop))


def _counts_epochs(facts: Facts, loop: cst.For) -> bool:
    """The loop's target is an integer count: `for epoch in range(...)` (also through
    `tqdm(range(...))`, `trange(...)`), or a name ddpify cannot see the items of, which
    stays as it always was. A loop over a literal list or tuple of other values (`for lr in
    [1e-3, 1e-2]`) or over a name assigned only such a list does not count, nor one over a
    parameter whose default is such a list and that the function never rebinds (`def
    sweep(model, loader, lrs=(1e-3, 1e-2)): for lr in lrs:`)."""
    iterated: cst.BaseExpression = loop.iter
    while isinstance(iterated, cst.Call) and iterated.args and (dotted_name(iterated.func) or "").split(".")[-1] in (
            "tqdm", "trange", "range"):
        if (dotted_name(iterated.func) or "").split(".")[-1] in ("trange", "range"):
            return True
        iterated = iterated.args[0].value
    name = dotted_name(iterated)
    values = facts.assigned_values.get(name, []) if name is not None else []
    if values and all(isinstance(value, (cst.List, cst.Tuple)) for value in values):
        iterated = values[0]
    elif not values and isinstance(iterated, cst.Name):
        iterated = _literal_default(facts, loop, iterated.value) or iterated
    return not isinstance(iterated, (cst.List, cst.Tuple)) or all(
        isinstance(element.value, cst.Integer) for element in iterated.elements)


def _named(name: str) -> Callable[[cst.Call], cst.BaseExpression]:
    def rewrite(_node: cst.Call) -> cst.BaseExpression:
        return cst.Name(name)
    return rewrite


def set_epoch(facts: Facts, edits: Edits, loader: Union[Loader, ExternalLoader], sampler: str,
               template: str = SET_EPOCH_CODE, via_loader_template: str = SET_EPOCH_VIA_LOADER_CODE) -> None:
    """At the top of the epoch loop: the loop around the pass over the loader, which may sit
    in another function than the loader (`for epoch ...: train(model, train_loader)`)."""
    returned_restarts = _restarted_where_returned(facts, loader)
    restarts = _iterators_restarted_in_training(facts, loader) + returned_restarts
    # `except StopIteration: it = iter(loader)` inside the step loop: each restart is a new
    # pass, whatever loops hold the steps.
    epoch_loops = [] if restarts else _epoch_loops(facts, loader)
    for position, (epoch_loop, held_there) in enumerate(epoch_loops):
        name_there = _through_a_wrapper(facts, epoch_loop, held_there)
        epoch = cast(str, epoch_counter(epoch_loop))
        via_loader = not isinstance(loader, ExternalLoader) and not (
            _self_in_scope(facts, sampler, epoch_loop, loader.function)
            or facts.function_of(epoch_loop) is loader.function)
        if position or not _counts_epochs(facts, epoch_loop) or (
                not isinstance(loader, ExternalLoader) and (runs_again(facts, epoch_loop, loader.function)
                                                            or _repeated_by_an_outer_loop(facts, epoch_loop, loader))):
            # A loop over something else than a count (`for lr in candidates:`, a float each
            # time) has no epoch number to hand set_epoch: it counts on from the sampler's.
            # A later phase over the same loader (`for epoch in range(finetune_epochs)` after
            # the warm-up's loop): its epochs count on from the sampler's own, so no phase
            # replays an order of another. So does a loop in a function that runs again over
            # the loader it is handed (`train(teacher, train_loader)`, then `train(student,
            # train_loader)`): counted from 0 each call, the second replays the first's orders.
            epoch = f"{name_there}.sampler.epoch + 1" if via_loader or isinstance(loader, ExternalLoader) \
                else f"{sampler}.epoch + 1"
        if isinstance(loader, ExternalLoader):
            code = template.format(loader=name_there, epoch=epoch)
        elif not via_loader:
            code = template.format(sampler=sampler, epoch=epoch)
        else:
            # The sampler variable is not in scope here; the loader still carries it.
            code = via_loader_template.format(loader=name_there, epoch=epoch)
        if _insert_set_epoch(facts, edits, loader, epoch_loop, held_there, code):
            edits.report("DDP202", epoch_loop)
    if epoch_loops:
        return
    # `while step < max_steps: for batch in loader:`, or `except StopIteration: it =
    # iter(loader)`: each new pass is an epoch, counted on the sampler itself.
    passes = [loop.body.body[0] for loop in _while_loops_around_passes(facts, loader)]
    passes += restarts
    for new_pass in passes:
        code = _new_pass_code(new_pass, new_pass in returned_restarts, loader, sampler, template,
                              via_loader_template)
        edits.insert_before(new_pass, Insertion(edits.statements(code)))
        edits.report("DDP202", new_pass)
    if passes:
        return
    # `def _train_epoch(self, epoch): for batch in self.loader:` called once per epoch from
    # code this file does not hold (a base class, another module): the epoch is handed in.
    for loop, epoch, name_there in _passes_given_the_epoch(facts, loader):
        code = template.format(sampler=sampler, epoch=epoch, loader=loader.name)
        if isinstance(loader, Loader) and not sampler.startswith("self.") \
                and facts.function_of(loop) is not loader.function:
            # The sampler variable is not in scope there; the loader handed in carries it.
            code = via_loader_template.format(loader=name_there, epoch=epoch)
        edits.insert_before(_before_the_progress_bar(facts, loop, name_there), Insertion(edits.statements(code)))
        edits.report("DDP202", loop)
        return
    if _set_epoch_in_whiles_around_project_training(facts, edits, loader, sampler, template, via_loader_template) \
            or _set_epoch_in_passes_called_from_while_loops(facts, edits, loader, sampler, template,
                                                            via_loader_template) \
            or _set_epoch_around_an_unseen_epoch_call(facts, edits, loader, sampler, template, via_loader_template):
        return
    _without_an_epoch_loop(facts, edits, loader)


def _set_epoch_around_an_unseen_epoch_call(facts: Facts, edits: Edits, loader: Union[Loader, ExternalLoader],
                                           sampler: str, template: str, via_loader_template: str) -> bool:
    """Rule: a loop counting epochs whose body hands the loader and the loop's count to a
    function ddpify cannot read (`for epoch in range(n): train_one_epoch(model, optimizer,
    data_loader, device, epoch)`, torchvision's references' engine, a file the script downloads):
    the function runs one epoch of that loader, so the loader's sampler learns the epoch at the
    top of that loop, as for a pass written there."""
    if not isinstance(loader, Loader):
        return False
    holders = facts.loader_holders_of(loader)
    placed = False
    for function, name in sorted(holders, key=lambda held: held[1]):
        for call in facts.nodes_of(cst.Call):
            callee = dotted_name(call.func) or ""
            if facts.function_of(call) is not function or callee in facts.functions or not callee \
                    or call in facts.training_helper_calls:  # (a module of the project sets it there)
                continue
            handed = {dotted_name(arg.value) for arg in call.args}
            innermost = facts.enclosing_loops(call)[:1]
            if name not in handed or not innermost or epoch_counter(innermost[0]) not in handed:
                continue
            loop = innermost[0]
            epoch = cast(str, epoch_counter(loop))
            code = template.format(sampler=sampler, epoch=epoch, loader=name) if (
                function is loader.function) else via_loader_template.format(loader=name, epoch=epoch)
            edits.insert_before(loop.body.body[0], Insertion(edits.statements(code)))
            edits.report("DDP202", loop)
            placed = True
    return placed


def _set_epoch_in_passes_called_from_while_loops(facts: Facts, edits: Edits, loader: Union[Loader, ExternalLoader],
                                                 sampler: str, template: str, via_loader_template: str) -> bool:
    """Rule: `def train_epoch(self): for batch in self.train_loader:` called inside `while
    self.epoch < epochs:` (the count kept on an attribute or a name the loop adds one to):
    each call is a new pass, and no `for` loop holds an epoch number to hand set_epoch. The
    pass counts on from the sampler's own epoch (`set_epoch(sampler.epoch + 1)`), at its top,
    so each epoch draws a new order on every rank alike, whatever counter the loop keeps.
    Only a training pass that no loop of its own function holds, in a function of this file
    called from inside a while loop's body."""
    done = False
    holders = facts.holders_from(loader.function, loader.name)
    for loop in facts.loops_over_values(holders):
        function = facts.function_of(loop)
        if function is None or facts.enclosing_loops(loop) or enclosing_whiles(facts, loop) \
                or not facts.loop_trains(loop):
            continue
        if not any(enclosing_whiles(facts, call) for call in facts.calls_of(function)):
            continue
        # (`self.train_loader` is held where __init__ sets it, read in every method.)
        name_there = next((name for name in facts.names_iterated_by(loop) for held_in, held in holders
                           if held == name and (held_in in (function, None) or name.startswith("self."))),
                          loader.name)
        if isinstance(loader, Loader) and not sampler.startswith("self.") and function is not loader.function:
            # The sampler variable is not in scope there; the loader handed in carries it.
            code = via_loader_template.format(loader=name_there, epoch=f"{name_there}.sampler.epoch + 1")
        else:
            code = template.format(sampler=sampler, epoch=f"{sampler}.epoch + 1", loader=name_there)
        edits.insert_before(_before_the_progress_bar(facts, loop, name_there), Insertion(edits.statements(code)))
        edits.report("DDP202", loop)
        done = True
    return done


def _set_epoch_in_whiles_around_project_training(facts: Facts, edits: Edits, loader: Union[Loader, ExternalLoader],
                                                 sampler: str, template: str, via_loader_template: str) -> bool:
    """Rule: `while epoch < args.epochs: engine.train_one_epoch(model, loader, optimizer);
    epoch += 1`, the pass in a training function or method of another module of the project
    handed the loader, called in the body of a while loop and in no for loop: each call is an
    epoch. That module sets no epoch for a loader it is handed, so it is set at the top of the
    while loop's body: with the user's counter where the loop keeps one (its test compares a
    name the body adds one to, `while epoch < n`), else counting on from the sampler's own
    (`while not trainer.done():`)."""
    names = {held for _, held in facts.holders_from(loader.function, loader.name)}
    objects = _objects_handed(facts, names)
    done: list[cst.While] = []
    for call in facts.training_helper_calls:
        whiles = enclosing_whiles(facts, call)
        if facts.enclosing_loops(call) or not whiles or whiles[0] in done:
            continue
        handed = [held for arg in call.args if not arg.star and (held := facts.held_name(arg.value)) in names]
        if not handed and isinstance(call.func, cst.Attribute) and dotted_name(call.func.value) in objects \
                and facts.function_of(call) is objects[cast(str, dotted_name(call.func.value))]:
            # `trainer.train_epoch()` on `trainer = Trainer(model, loader, ...)`.
            handed = [name for name in names if facts.sees_value(call, name, loader.function)][:1]
        if not handed:
            continue
        loop = whiles[0]
        name_there = handed[0]
        via_loader = isinstance(loader, Loader) and not sampler.startswith("self.") \
            and facts.function_of(loop) is not loader.function
        counter = while_counter(loop)
        if isinstance(loader, ExternalLoader) or via_loader:
            code = via_loader_template.format(loader=name_there, epoch=counter or f"{name_there}.sampler.epoch + 1")
        else:
            code = template.format(sampler=sampler, epoch=counter or f"{sampler}.epoch + 1", loader=name_there)
        first = cast(cst.IndentedBlock, loop.body).body[0]
        edits.insert_before(first, Insertion(edits.statements(code)))
        edits.report("DDP202", loop)
        done.append(loop)
    return bool(done)


def _objects_handed(facts: Facts, names: set[str]) -> dict[str, Optional[cst.FunctionDef]]:
    """The names of training objects of another module built with one of `names` among the
    arguments their methods loop over (`trainer = Trainer(model, loader, ...)`), each with the
    function that builds it."""
    found: dict[str, Optional[cst.FunctionDef]] = {}
    for made in facts.training_constructors:
        assign = facts.parents.get(made)
        if isinstance(assign, cst.Assign) and len(assign.targets) == 1 and any(
                facts.held_name(value) in names for value in facts.iterated_arguments.get(made, ())):
            target = dotted_name(assign.targets[0].target)
            if target is not None:
                found[target] = facts.function_of(made)
    return found


def while_counter(loop: cst.While) -> Optional[str]:
    """The epoch count a while loop keeps: the name (or attribute) its test compares (`epoch <
    args.epochs`, `self.epoch <= last`, `epoch != n`) that a statement of its body, outside
    any branch, adds one to (`epoch += 1`). None for any other loop."""
    test = loop.test
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and isinstance(
            test.comparisons[0].operator, (cst.LessThan, cst.LessThanEqual, cst.NotEqual))):
        return None
    counter = dotted_name(test.left)
    body = loop.body.body if isinstance(loop.body, cst.IndentedBlock) else ()
    counted = any(
        isinstance(line, cst.SimpleStatementLine) and any(
            isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.AddAssign)
            and dotted_name(small.target) == counter and isinstance(small.value, cst.Integer)
            and small.value.value == "1" for small in line.body)
        for line in body)
    return counter if counter is not None and counted else None


def _before_the_progress_bar(facts: Facts, loop: cst.For, name: str) -> Statement:
    """The pass, or the statement before it that rebinds the loader's name to a wrapper of
    itself (`data_loader = tqdm(data_loader, file=sys.stdout)`): the sampler is the loader's,
    and a progress bar has none, so its epoch is set before the name is rebound."""
    function = facts.function_of(loop)
    rebinds = [facts.statement_of(value) for value in facts.assigned_values.get(name, ())
               if isinstance(value, cst.Call) and facts.function_of(value) is function and value.args
               and name in names_within(value.args[0].value)]
    earlier = [statement for statement in rebinds if statement is not None
               and facts.start_of(statement) < facts.start_of(loop)
               and facts.parents.get(statement) is facts.parents.get(loop)]
    return min(earlier, key=facts.start_of, default=loop)


def _literal_default(facts: Facts, loop: cst.For, name: str) -> Optional[cst.BaseExpression]:
    """The literal list or tuple that `name`, a parameter of the loop's function that the
    function never rebinds, defaults to."""
    function = facts.function_of(loop)
    if function is None or any(name in assigned_names(assign) for assign in find_all(function.body, cst.Assign)):
        return None
    for parameter in [*function.params.params, *function.params.kwonly_params]:
        if parameter.name.value == name and isinstance(parameter.default, (cst.List, cst.Tuple)):
            return parameter.default
    return None


def _without_an_epoch_loop(facts: Facts, edits: Edits, loader: Union[Loader, ExternalLoader]) -> None:
    """No loop counts this loader's epochs: a generator's passes over it do, or a single
    pass needs none, or the caller's loop sets it; else DDP211."""
    if _set_epoch_in_generator_passes(facts, edits, loader):
        return
    if isinstance(loader, Loader) and (set_epoch_at_restarts_of_listed_loaders(facts, edits, loader)
                                       or _set_epoch_at_restarts_of_an_attribute(facts, edits, loader)):
        return
    handed_in = isinstance(loader, ExternalLoader) and loader.statement is loader.function
    if not handed_in and not handed_to_project_training(facts, loader.function, loader.name) \
            and not _report_one_pass(facts, edits, loader):
        # (A loader this helper module is handed gets its epoch from the caller's loop.)
        edits.report("DDP211", loader.call, _no_epoch_loop_reason(facts, edits, loader))


def _set_epoch_in_generator_passes(facts: Facts, edits: Edits, loader: Union[Loader, ExternalLoader]) -> bool:
    """Rule: `def endless(loader): while True: for x, _ in loader: yield x`, handed this
    loader, the training steps drawing from it with next(): each pass of the generator is an
    epoch, so the sampler learns its next epoch at the top of each pass (counted on the
    sampler itself), where the generator's parameter names the loader. Under plain `python`
    the loader keeps its own sampler, and the test is False."""
    holders = facts.holders_from(loader.function, loader.name)
    done = False
    for call, (loop, parameter) in facts.generator_passes.items():
        if loop not in facts.loops_calling_training and loop not in facts.training_generator_passes:
            continue
        handed = [facts.held_name(arg.value) for arg in call.args if not arg.star]
        if not any((facts.function_of(call), name) in holders or (None, name) in holders or (
                name is not None and name.startswith("self.") and any(held == name for _, held in holders))
                for name in handed):
            continue
        code = SET_EPOCH_EXTERNAL_CODE.format(loader=parameter, epoch=f"{parameter}.sampler.epoch + 1")
        statements = edits.statements(code)
        if not _inserted_already(edits, loop, statements):
            edits.insert_before(loop, Insertion(statements))
            edits.report("DDP202", loop)
        done = True
    return done


def _report_one_pass(facts: Facts, edits: Edits, loader: Union[Loader, ExternalLoader]) -> bool:
    """DDP220 for a loader passed over once (_passed_over_once): no set_epoch, and why."""
    once = _passed_over_once(facts, loader)
    if once is not None:
        edits.report("DDP220", loader.call, (
            f"sharded loader passed over once: there is no epoch to set (`{edits.code(once)}` "
            "draws its order once, for epoch 0, as in the original)"))
    return once is not None


_ONE_PASS_ITERATORS = frozenset({"builtins.iter", "itertools.cycle"})


def _passed_over_once(facts: Facts, loader: Union[Loader, ExternalLoader]) -> Optional[cst.Call]:
    """Rule: a training loader iterated exactly once needs no set_epoch. That is, where the
    loader goes (its holders), exactly one `iter(...)` or `itertools.cycle(...)` of it is made,
    assigned to a plain name, outside every loop (and in a function no loop calls), and
    every loop that takes its batches does so by `next()` on that name. `cycle` replays the
    batches of its first pass, so the original trained on one order too, and so does a
    single `iter` never restarted. Anything else (a `for` over the loader, a second
    iterator, a peek with `next(iter(loader))`) is no single pass: the caller reports
    DDP211. An iterator made in a top-level function nothing calls or names makes no pass.
    Returns the call that makes the iterator."""
    holders = facts.holders_from(loader.function, loader.name)
    made: list[cst.Call] = []
    for call in dict.fromkeys(call for qualified in sorted(_ONE_PASS_ITERATORS)
                              for call in facts.calls_named.get(qualified, ())):
        if not call.args or call.args[0].star or _never_called(facts, facts.function_of(call)):
            continue
        held = dotted_name(call.args[0].value)
        if held is not None and any(name == held and facts.sees_value(call, name, function)
                                    for function, name in holders):
            made.append(call)
    if len(made) != 1:
        return None
    call = made[0]
    assign = facts.parents.get(call)
    if not isinstance(assign, cst.Assign) or len(assign.targets) != 1 or not isinstance(
            assign.targets[0].target, cst.Name):
        return None
    iterator = assign.targets[0].target.value
    if facts.within_a_loop(assign):
        return None
    function = facts.function_of(call)
    if function is not None and any(facts.within_a_loop(caller) for caller in facts.calls_of(function)):
        return None
    loops = facts.loops_over_values(holders)
    taking = facts.loops_over.get(iterator, [])
    if not loops and _drawn_only_by_while_loops(facts, iterator, function):
        return call
    if not loops or any(loop not in taking for loop in loops):
        return None
    return call


def _drawn_only_by_while_loops(facts: Facts, iterator: str, function: Optional[cst.FunctionDef]) -> bool:
    """Rule: `batches = itertools.cycle(loader)` then `while step < max_steps: x, y =
    next(batches)`: a `while` step loop draws from the one iterator, which no `for` loop
    takes: the loader is passed over once there as well. Every next() of it sits in a
    `while` of the iterator's function, and there is at least one."""
    draws = [call for call in facts.calls_named.get("builtins.next", ())
             if call.args and dotted_name(call.args[0].value) == iterator and facts.function_of(call) is function]
    return bool(draws) and all(_in_a_while(facts, draw) for draw in draws)


def _in_a_while(facts: Facts, node: cst.CSTNode) -> bool:
    child: cst.CSTNode = node
    parent = facts.parents.get(node)
    while parent is not None and not isinstance(parent, (cst.FunctionDef, cst.Lambda)):
        if isinstance(parent, cst.While) and child is parent.body:
            return True
        child, parent = parent, facts.parents.get(parent)
    return False


def _never_called(facts: Facts, function: Optional[cst.FunctionDef]) -> bool:
    """A top-level function of this file that nothing calls, nor hands on by name (a
    restart helper left over, `def get_batch(it): ... except StopIteration: it =
    iter(loader)`): its iterators make no pass."""
    if function is None or facts.function_of(function) is not None or facts.class_of(function) is not None:
        return False
    name = function.name.value
    return not facts.calls_of(function) and not any(
        isinstance(node, cst.Name) and node.value == name for node in facts.nodes_of(cst.Name)
        if facts.parents.get(node) is not function)


def _no_epoch_loop_reason(facts: Facts, edits: Edits, loader: Union[Loader, ExternalLoader]) -> Optional[str]:
    """A loader built as the argument of a call ddpify cannot look into (a library's
    `fit(model, DataLoader(...))`): the epochs are counted in there."""
    call = facts.call_taking(loader.call) if isinstance(loader, Loader) and loader.inline is not None else None
    if call is None:
        return None
    return (f"no epoch loop found for set_epoch: the loader goes to `{edits.code(call.func)}(...)`, whose "
            "epochs ddpify cannot see; call `loader.sampler.set_epoch(epoch)` there at the start of each "
            "epoch, or every epoch repeats the first one's order")


def _self_in_scope(facts: Facts, sampler: str, epoch_loop: cst.For, function: Optional[cst.FunctionDef]) -> bool:
    """`self.train_sampler` is this object's where the epoch loop is a method of the class
    that made it; from main()'s loop over `trainer.training(epoch)` the loader carries it."""
    loop_function = facts.function_of(epoch_loop)
    return sampler.startswith("self.") and function is not None and loop_function is not None \
        and facts.class_of(loop_function) is not None and facts.class_of(loop_function) is facts.class_of(function)


def _insert_set_epoch(facts: Facts, edits: Edits, loader: Union[Loader, ExternalLoader], epoch_loop: cst.For,
                      name_there: str, code: str) -> bool:
    """The set_epoch code where the epoch loop starts a pass; False when that loop has it
    already."""
    if isinstance(loader, Loader) and loader.inline is not None and facts.ancestor_in(
            loader.statement, epoch_loop.body) is not None:
        # Built anew each epoch where it is used (`for x, y in DataLoader(...)`): its new
        # sampler learns the epoch right after it is made, before that statement runs.
        edits.insert_before(loader.statement, Insertion(edits.statements(code)))
    elif facts.ancestor_in(loader.statement, epoch_loop.body) is not None:
        # A loader built anew each epoch: its sampler learns the epoch where it is made.
        edits.insert_after(loader.statement, edits.statements(code))
    elif (rebound := _bound_inside(facts, epoch_loop, name_there)) is not None:
        # Made anew each epoch by a call (`train_dl = make_loader(...)` in the loop).
        edits.insert_after(rebound, edits.statements(code))
    else:
        first = epoch_loop.body.body[0]
        statements = edits.statements(code)
        if _inserted_already(edits, first, statements):
            # Two loaders that reach one loop under one name (`self.train_loader` of a
            # Trainer built once per loader) share its set_epoch.
            return False
        edits.insert_before(first, Insertion(statements))
    return True


def _inserted_already(edits: Edits, anchor: BlockItem, statements: list[Statement]) -> bool:
    return any(len(insertion.statements) == len(statements) and all(
        old.deep_equals(new) for old, new in zip(insertion.statements, statements))
        for insertion in edits.before.get(anchor, []))


def _epoch_loops(facts: Facts, loader: Union[Loader, ExternalLoader]) -> list[tuple[cst.For, str]]:
    """Each epoch loop around a pass over the loader, with the name the loader has there, in
    source order: every one that trains and is neither inside nor around one already taken (a
    second training phase over the same loader), or, where none trains, the first one found."""
    found: list[tuple[cst.For, str]] = []
    for pass_loop, name_there in facts.epoch_loops(loader.name, loader.function):
        # `for epoch ...: for fold, (train_ids, val_ids) in ...:` the epoch is further out.
        epoch_loop = next((loop for loop in [pass_loop, *facts.enclosing_loops(pass_loop)]
                           if epoch_counter(loop)), None)
        if epoch_loop is not None and all(epoch_loop is not loop for loop, _ in found):
            found.append((epoch_loop, name_there))
    # A loop found only for the look at one batch it holds (`dataiter = iter(loader)`), or
    # around one, is not the epoch loop of the passes written inside it (_peeks_beside_a_pass).
    peeking = {facts.enclosing_loops(call)[0] for call in facts.calls_named.get("builtins.iter", ())
               if call.args and dotted_name(call.args[0].value) == loader.name
               and facts.function_of(call) is loader.function and _peeks_beside_a_pass(facts, loader, call)}
    around_peeks = peeking.union(*(facts.enclosing_loops(loop) for loop in peeking))
    found = [(loop, name) for loop, name in found if loop not in around_peeks or not any(
        loop in facts.enclosing_loops(other) for other, _ in found)]
    training: list[tuple[cst.For, str]] = []
    for epoch_loop, name_there in sorted(found, key=lambda pair: facts.start_of(pair[0])):
        if facts.loop_trains(epoch_loop) and not any(
                loop in facts.enclosing_loops(epoch_loop) or epoch_loop in facts.enclosing_loops(loop)
                for loop, _ in training):
            training.append((epoch_loop, name_there))
    if not found and isinstance(loader, ExternalLoader) and loader.statement is loader.function:
        return _loops_around_training_calls(facts, loader)
    return training or found[:1]


def _loops_around_training_calls(facts: Facts, loader: ExternalLoader) -> list[tuple[cst.For, str]]:
    """Rule: a shared epoch function handed a different loader by each call (`run_epoch(
    self.tr_loader, training=True)`, then `run_epoch(self.cv_loader, training=False)` in one
    epoch loop) is no one caller's: the epoch is set where it is called, on the loader each
    training call hands it (not on those of the calls that evaluate, call_modes.py), at the
    top of the epoch loop around that call, under the test that it is sharded (the other
    module decides that). The argument is a name, an attribute or a literal-keyed entry of one
    (`self.loaders["train"]`); any other expression is left alone."""
    function = cast(cst.FunctionDef, loader.function)
    found: list[tuple[cst.For, str]] = []
    for call in sorted(facts.calls_of(function), key=facts.start_of):
        epoch_loop = next((loop for loop in facts.enclosing_loops(call) if epoch_counter(loop)), None)
        # `self.run_epoch(loader, ...)`: a method called on its object fills `self` itself.
        on_object = facts.class_of(function) is not None and isinstance(call.func, cst.Attribute)
        positional = positional_parameters(function)[1 if on_object else 0:]
        argument = argument_for(call, loader.name, positional.index(loader.name)
                                if loader.name in positional else None)
        if epoch_loop is None or argument is None or evaluating_call(facts, function, call, on_object):
            continue
        held = dotted_name(argument)
        if held is None and isinstance(argument, cst.Subscript):
            holder = dotted_name(argument.value)
            key = literal_entry(argument, holder) if holder is not None else None
            held = f'{holder}["{key}"]' if key is not None else None
        if held is not None and (epoch_loop, held) not in found:
            found.append((epoch_loop, held))
    return found


def handed_to_project_training(facts: Facts, function: Optional[cst.FunctionDef], name: str) -> bool:
    """The loader `name` holds in `function` goes to a Trainer or training function of another
    module of the project, which sets the epoch where it iterates it (library mode,
    plan_external); by itself or inside a dict (_dict_entries)."""
    names = {held for _, held in facts.holders_from(function, name)}
    calls = [*facts.training_helper_calls, *facts.training_constructors]
    return any(not arg.star and facts.held_name(arg.value) in names for call in calls for arg in call.args) or any(
        facts.held_name(entry) in names
        for call in calls for value, key in facts.iterated_entries.get(call, ())
        for entry in _dict_entries(facts, call, value, key))


def _dict_entries(facts: Facts, call: cst.Call, value: cst.BaseExpression, key: str) -> list[cst.BaseExpression]:
    """Rule: a loader handed inside a dict (`data = {"tr_loader": tr_loader, ...}` then
    `Solver(data, model, optimizer, args)`, or the literal in the call) to a function or Trainer
    of another module of the project that iterates that entry (`self.tr_loader =
    data["tr_loader"]`, then `for batch in self.tr_loader`) is handed to project training, as a
    loader passed by itself is: that module sets the epoch where it iterates it. The dict is a
    literal with string keys, bound once in the calling function; any other dict is not read."""
    dicts: list[cst.BaseExpression] = [value]
    if isinstance(value, cst.Name):
        function = facts.function_of(call)
        dicts = [each for each in facts.assigned_values.get(value.value, ()) if facts.function_of(each) is function]
        if len(dicts) != 1:
            return []
    literal = dicts[0]
    if not isinstance(literal, cst.Dict):
        return []
    return [element.value for element in literal.elements if isinstance(element, cst.DictElement)
            and isinstance(element.key, cst.SimpleString) and element.key.evaluated_value == key]


def _passes_given_the_epoch(facts: Facts, loader: Union[Loader, ExternalLoader]
                            ) -> list[tuple[cst.For, str, str]]:
    """Training passes over the loader, not inside another loop, in a function that takes
    the epoch as a parameter (`epoch`, `cur_epoch`, `epoch_idx`), with the loader's name there."""
    found: list[tuple[cst.For, str, str]] = []
    holders = facts.holders_from(loader.function, loader.name)
    for loop in facts.loops_over_values(holders):
        function = facts.function_of(loop)
        if function is None or facts.enclosing_loops(loop) or not facts.loop_trains(loop):
            continue
        epoch = epoch_parameter(function)
        name_there = next((name for held_in, name in sorted(holders, key=lambda held: held[1])
                           if held_in is function and name in facts.names_iterated_by(loop)), loader.name)
        if epoch is not None:
            found.append((loop, epoch, name_there))
    return found


def epoch_parameter(function: cst.FunctionDef) -> Optional[str]:
    """The parameter that hands a function the epoch it runs (`epoch`, `cur_epoch`,
    `epoch_idx`); not a count of them (`epochs`, `num_epochs`, `max_epoch`), whose value is
    the number of epochs, not the one being run."""
    return next((name for name in sorted(parameter_names(function)) if "epoch" in name.lower()
                 and not name.lower().startswith(("n_", "num", "max", "total"))
                 and not name.lower().endswith("epochs")), None)


def _bound_inside(facts: Facts, loop: cst.For, name: str) -> Optional[Statement]:
    """The last statement inside the loop (not in a nested function) that assigns `name`."""
    found = [facts.statement_of(assign) for assign in find_all(loop.body, cst.Assign, into_functions=False)
             if any(name in names_within(target.target) for target in assign.targets)]
    return max(found, key=facts.start_of, default=None)


def _while_loops_around_passes(facts: Facts, loader: Union[Loader, ExternalLoader]) -> list[cst.While]:
    """While loops around a pass over the loader in its own function, with no for loop
    between them (that would be the epoch loop)."""
    found: list[cst.While] = []
    for loop in facts.loops_over.get(loader.name, ()):
        if facts.function_of(loop) is not loader.function:
            continue
        parent = facts.parents.get(loop)
        while parent is not None and not isinstance(parent, (cst.FunctionDef, cst.For)):
            if isinstance(parent, cst.While) and parent not in found:
                found.append(parent)
                break
            parent = facts.parents.get(parent)
    return found


def _iterators_restarted_in_training(facts: Facts, loader: Union[Loader, ExternalLoader]) -> list[Statement]:
    """The statements in a training loop that start a new pass over the loader with iter():
    a step loop that takes its batches with next() and starts over when they run out. Not a
    look at one batch beside the passes (_peeks_beside_a_pass)."""
    return [facts.statement_of(call) for call in facts.calls_named.get("builtins.iter", ())
            if call.args and dotted_name(call.args[0].value) == loader.name
            and (facts.function_of(call) is loader.function
                 and (any(facts.loop_trains(loop) for loop in facts.enclosing_loops(call))
                      or any(while_trains(facts, loop) for loop in enclosing_whiles(facts, call)))
                 and not _peeks_beside_a_pass(facts, loader, call)
                 or _restarted_by_helper(facts, loader, call))]


def _peeks_beside_a_pass(facts: Facts, loader: Union[Loader, ExternalLoader], call: cst.Call) -> bool:
    """Rule: `inputs, _ = next(iter(loader))` (a look at one batch: its shape, a graph for
    TensorBoard, a first loss) in a loop (a sweep, a fold, a run) whose training is a `for`
    pass over the same loader written inside that loop, next to the look: the passes are the
    epochs, and their own loop sets the epoch at its top. The look is no restart: were it one,
    set_epoch would go before it alone, and every epoch of the passes after it would draw the
    same order."""
    node: Optional[cst.CSTNode] = call
    while node is not None:
        if isinstance(node, cst.ExceptHandler):
            return False
        node = facts.parents.get(node)
    around = facts.enclosing_loops(call)
    if not around:
        return False
    passes = facts.loops_over_values(facts.holders_from(loader.function, loader.name))
    return any(facts.loop_trains(loop) and loop not in around and around[0] in facts.enclosing_loops(loop)
               for loop in passes)


def _restarted_where_returned(facts: Facts, loader: Union[Loader, ExternalLoader]) -> list[Statement]:
    """Rule: a loader built in a function that returns it (alone or in a tuple) to the code
    that trains (`train_loader, test_loader = get_loaders(...)`, then `except StopIteration:
    data_iter = iter(train_loader)` in the step loop): each restart in that StopIteration
    handler, inside a loop that trains, is a new pass, as where the loader is built. Only
    a restart: the first `iter()` is epoch 0, as the sampler starts."""
    if not isinstance(loader, Loader) or loader.function is None:
        return []
    holders = facts.holders_from(loader.function, loader.name) - {(loader.function, loader.name)}
    found: list[Statement] = []
    for call, iterated in _iterators_made_at_stop_iteration(facts):
        name = dotted_name(iterated)
        if name is None or name.startswith("self.") or (facts.function_of(call), name) not in holders:
            continue
        if any(facts.loop_trains(loop) for loop in facts.enclosing_loops(call)) \
                or any(while_trains(facts, loop) for loop in enclosing_whiles(facts, call)):
            statement = facts.statement_of(call)
            if statement is not None:
                found.append(statement)
    return found


def _new_pass_code(new_pass: cst.CSTNode, returned: bool, loader: Union[Loader, ExternalLoader], sampler: str,
                   template: str, via_loader_template: str) -> str:
    """The set_epoch code before a new pass: through the sampler variable, or, for a loader
    its builder returned (`train_loader, test_loader = get_loaders()`), through the loader,
    which carries the sampler whose variable stays in the builder."""
    if not returned:
        return template.format(sampler=sampler, epoch=f"{sampler}.epoch + 1", loader=loader.name)
    name_there = _restarted_name(new_pass)
    return via_loader_template.format(loader=name_there, epoch=f"{name_there}.sampler.epoch + 1")


def _restarted_name(statement: cst.CSTNode) -> str:
    """The loader's name in the `iter(loader)` that this restart statement makes."""
    call = next(node for node in find_all(statement, cst.Call) if dotted_name(node.func) == "iter")
    return cast(str, dotted_name(call.args[0].value))


def set_epoch_at_restarts_of_listed_loaders(facts: Facts, edits: Edits, loader: Loader) -> bool:
    """Rule: `self.loaders.append(loader)` where the loader is built, and in a method of the
    same class `except StopIteration: self.iterators[i] = iter(self.loaders[i])` (a batch
    drawn from each source in turn, `get_batch()`): each restart is a new pass over that
    entry, so its sampler counts on from its own epoch right before it, through the entry
    (the sampler's variable is not in scope there). Only a restart in a StopIteration
    handler: a first `iter()` of each entry is epoch 0, as the sampler starts."""
    lists = _lists_holding(facts, loader)
    if not lists:
        return False
    owner = facts.class_of(loader.function)
    done = False
    for call, entry in _iterators_made_at_stop_iteration(facts):
        if not isinstance(entry, cst.Subscript) or dotted_name(entry.value) not in lists \
                or facts.class_of(facts.function_of(call)) is not owner:
            continue
        statement = facts.statement_of(call)
        name_there = edits.code(entry)
        code = SET_EPOCH_EXTERNAL_CODE.format(loader=name_there, epoch=f"{name_there}.sampler.epoch + 1")
        edits.insert_before(statement, Insertion(edits.statements(code)))
        edits.report("DDP202", statement)
        done = True
    return done


def _set_epoch_at_restarts_of_an_attribute(facts: Facts, edits: Edits, loader: Loader) -> bool:
    """Rule: `self.loader = DataLoader(...)` in a method of a class, and in a method of the
    same class `except StopIteration: self.iterator = iter(self.loader)` (an endless loader
    or batch stream handing out one batch per step, makemore's InfiniteDataLoader): each
    restart is a new pass, so the sampler counts on from its own epoch right before it, and
    every rank draws a new order alike (a DistributedSampler pads each rank to the same
    count, so all ranks restart at the same step). The first `iter()` is epoch 0, as the
    sampler starts. Under plain `python` the loader's sampler is not a DistributedSampler."""
    owner = facts.class_of(loader.function) if loader.function is not None else None
    if owner is None or not loader.name.startswith("self."):
        return False
    done = False
    for call, iterated in _iterators_made_at_stop_iteration(facts):
        if dotted_name(iterated) != loader.name or facts.class_of(facts.function_of(call)) is not owner:
            continue
        statement = facts.statement_of(call)
        code = SET_EPOCH_EXTERNAL_CODE.format(loader=loader.name, epoch=f"{loader.name}.sampler.epoch + 1")
        edits.insert_before(statement, Insertion(edits.statements(code)))
        edits.report("DDP202", statement)
        edits.imports.add("DistributedSampler")
        done = True
    return done


def _lists_holding(facts: Facts, loader: Loader) -> set[str]:
    """`self.loaders` for `self.loaders.append(loader)` in the function that builds the loader."""
    held: set[str] = set()
    for call in calls_within(loader.function if loader.function is not None else facts.module):
        if isinstance(call.func, cst.Attribute) and call.func.attr.value == "append" and len(call.args) == 1 \
                and dotted_name(call.args[0].value) == loader.name and facts.function_of(call) is loader.function:
            container = dotted_name(call.func.value)
            if container is not None and container.startswith("self."):
                held.add(container)
    return held


def _restarted_by_helper(facts: Facts, loader: Union[Loader, ExternalLoader], call: cst.Call) -> bool:
    """`def get_batch(it): ... except StopIteration: it = iter(train_loader)` at module level,
    the loader a global of the script, called only in training loops: each restart there is
    a new pass, wherever the steps are."""
    function = facts.function_of(call)
    if function is None or loader.function is not None or facts.function_of(function) is not None \
            or facts.binds_locally(function, loader.name) or not _in_stop_iteration_handler(facts, call):
        return False
    callers = facts.calls_of(function)
    return bool(callers) and all(
        any(facts.loop_trains(loop) for loop in facts.enclosing_loops(caller)) for caller in callers)


def _iterators_made_at_stop_iteration(facts: Facts) -> Iterator[tuple[cst.Call, cst.BaseExpression]]:
    """Each `iter(x)` made in an `except StopIteration:` handler, with x: a step loop's new
    pass once the batches run out. The restart rules tell by x (its holder) whose pass it is:
    a loader a builder returned (`iter(train_loader)`), an attribute (`iter(self.loader)`),
    an entry of a list of loaders (`iter(self.loaders[i])`)."""
    for call in facts.calls_named.get("builtins.iter", ()):
        if call.args and not call.args[0].star and _in_stop_iteration_handler(facts, call):
            yield call, call.args[0].value


def _in_stop_iteration_handler(facts: Facts, node: cst.CSTNode) -> bool:
    parent = facts.parents.get(node)
    while parent is not None and not isinstance(parent, cst.FunctionDef):
        if isinstance(parent, cst.ExceptHandler):
            return parent.type is not None and dotted_name(parent.type) == "StopIteration"
        parent = facts.parents.get(parent)
    return False


def enclosing_whiles(facts: Facts, node: cst.CSTNode) -> list[cst.While]:
    """While loops whose body (not test) holds node, up to the function."""
    return [loop for loop in facts.enclosing_for_and_while_loops(node) if isinstance(loop, cst.While)]


def while_trains(facts: Facts, loop: cst.While) -> bool:
    """`while step < max_steps:` whose body takes training steps: backward() or step()
    inside it, or a call of a function of this file that trains."""
    inside = set(calls_within(loop.body))
    return any(call in inside for call in facts.training_calls) or any(
        facts.functions.get(dotted_name(call.func) or "") in facts.training_functions for call in inside)


_CYCLED = TRAINING.replace("import torch\n", "import itertools\n\nimport torch\n", 1).replace(
    "for epoch in range(3):\n    for x, y in loader:\n", "batches = itertools.cycle(loader)\nfor step in range(20):\n"
    "    if True:\n        x, y = next(batches)\n").replace("print(epoch,", "print(step,")

CASES = (
    Emits(TRAINING, "DDP202", ("sampler.set_epoch(epoch)",)),
    Emits(TRAINING.replace("for epoch in range(3):\n", "if True:\n"), "DDP211"),
    Silent(TRAINING, "DDP211"),
    # Epochs counted by enumerate over a count: its count is the epoch.
    Emits(TRAINING.replace("for epoch in range(3):\n", "for idx, epoch in enumerate(range(1, 4)):\n"), "DDP202",
          ("sampler.set_epoch(idx)",)),
    # A loader built as the argument of a library's function: sharded, its epochs out of sight.
    Emits(TRAINING.replace("from torch.utils", "from somelib import fine_tune\nfrom torch.utils")
          + "fine_tune(model, DataLoader(dataset, batch_size=4, shuffle=True), optimizer)\n", "DDP211",
          ("fine_tune_sampler = DistributedSampler(dataset, shuffle=True) if distributed else None",
           "shuffle=fine_tune_sampler is None, sampler=fine_tune_sampler")),
    # A second training phase over the same loader counts its epochs on from the first's.
    Emits(TRAINING.replace("    print(epoch, loss.item())\n", "    print(epoch, loss.item())\n"
                           "for epoch in range(2):\n    for x, y in loader:\n"
                           "        loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))\n"
                           "        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()\n"),
          "DDP202", ("sampler.set_epoch(epoch)", "sampler.set_epoch(sampler.epoch + 1)")),
    # One iterator made outside every loop: one pass, no epoch to set (DDP220, not DDP211).
    Emits(_CYCLED, "DDP220"),
    Silent(_CYCLED, "DDP211"),
    # A restart helper nothing calls makes no second pass.
    Emits(_CYCLED.replace("batches = ", "def restart(it):\n    try:\n        return next(it)\n"
                          "    except StopIteration:\n        return next(iter(loader))\n\n\nbatches = "), "DDP220"),
    # A peek at the first batch before it is a second pass over the loader.
    Emits(_CYCLED.replace("batches = ", "shapes = next(iter(loader))\nbatches = "), "DDP211"),
)
