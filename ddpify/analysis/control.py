"""Loops and training: the epoch loop around a pass over a loader, where training starts,
which functions and loops train, and which top-level code runs when the file runs."""
from collections.abc import Iterable, Mapping
from typing import Optional, Union

import libcst as cst

from ddpify.analysis import memo
from ddpify.analysis.facts import DictPass, ExternalLoader, ExternalLoaderDict, Holder, Loader, Model, PhasePick
from ddpify.analysis.names import DATA_PARALLEL, DISTRIBUTED_DATA_PARALLEL, has_role_word, trains_by_look
from ddpify.analysis.nodes import (
    assignment_pairs,
    calls_within,
    dotted_name,
    handed_for,
    names_in,
    names_within,
    parameter_names,
    positional_parameters,
    string_value,
)
from ddpify.analysis.step_callbacks import mark_passes_handed_a_step
from ddpify.analysis.values import ValueFlow, literal_entry

# Facts.phase_picks of each module, read once per migration.
_PHASE_PICKS: dict[cst.Module, dict[cst.For, PhasePick]] = memo.per_migration_store()


class Facts(ValueFlow):
    """Everything one read of the module found, with the queries over it."""

    def epoch_loops(self, name: str, function: Optional[cst.FunctionDef],
                    depth: int = 0) -> list[tuple[cst.For, str]]:
        """Loops around each pass over the loader held by `name` in `function`.

        Follows the loader into the functions it is passed to (`train(model, loader)`), so the
        epoch loop in main() is found when the batch loop lives in train(). Yields (loop, the
        name the loader has inside that loop). An attribute (`self.loader`) is followed into
        every method of its class.
        """
        found: list[tuple[cst.For, str]] = []
        if depth > 3:
            return found
        for loop in [*self.loops_over.get(name, ()), *self.training_passes_in_one_expression(name)]:
            if self.sees_value(loop, name, function):
                outer = self.enclosing_loops(loop)
                if outer:
                    found.append((outer[0], name))
                elif name.startswith("self.") or self.function_of(loop) is not function:
                    # `for x in self.loader` in a method that fit() calls once per epoch.
                    found.extend(self._loops_around_calls_of(self.function_of(loop), name))
        found.extend(self._loops_around_phase_picks(name, function))
        for holder, caller in self._returned_to(name, function):
            found.extend(self.epoch_loops(holder, caller, depth + 1))
        for attribute in self.stored_in_self(name, function):
            found.extend(self.epoch_loops(attribute, function, depth + 1))
        for call in self.training_helper_calls:
            # The loader handed to a helper module's training function, once per epoch.
            outer = self.enclosing_loops(call)
            if outer and self.sees_value(call, name, function) and any(
                    not arg.star and self.held_name(arg.value) == name for arg in call.args):
                found.append((outer[0], name))
        found.extend(self._loops_around_passes_of_objects_handed(name, function))
        for callee, parameter, call in self._calls_passing(name, function):
            outer = self.enclosing_loops(call)
            if outer and self.epoch_loops(parameter, callee, depth + 1) == [] and self._iterates(
                parameter, callee
            ):
                found.append((outer[0], name))
            else:
                found.extend(self.epoch_loops(parameter, callee, depth + 1))
        return found

    def _loops_holding_passes_in_one_expression(self, holders: set[Holder]) -> set[cst.For]:
        """The innermost loops whose body makes a training pass over a loader in one expression
        (`for epoch ...: losses = [step(x, y) for x, y in loader]`): their batches come from
        that loader, not from slices built by hand."""
        found: set[cst.For] = set()
        for function, name in holders:
            for node in self.training_passes_in_one_expression(name):
                if self.sees_value(node, name, function):
                    found.update(self.enclosing_loops(node)[:1])
        return found

    def _loops_around_passes_of_objects_handed(self, name: str, function: Optional[cst.FunctionDef]
                                               ) -> list[tuple[cst.For, str]]:
        """The epoch loops around the passes of a training object that is handed the loader
        `name` by its constructor (loops_around_passes_of), where the loader keeps its name."""
        return [(loop, name) for made in self.training_constructors
                if any(self.held_name(value) == name for value in self.iterated_arguments.get(made, ()))
                and self.sees_value(made, name, function) for loop in self.loops_around_passes_of(made)]

    def loops_around_passes_of(self, made: cst.Call) -> list[cst.For]:
        """Rule: `trainer = Train(model, train_loader, ...)`, a class of another module whose
        methods loop over what its constructor is handed (iterated_arguments), then `for epoch
        in ...: trainer.run_epoch()`: each call of a training method of that object inside a
        loop of the function that made it is a pass over the loader, and the loop around it
        counts the epochs. That module sets no epoch for a loader it is handed (epochs.py), so
        it is set here. A call handed the loop's count (`trainer.training(epoch)`) is left to
        the method it reaches, which sets it where it takes the epoch; an object with no single
        name, or called in another function, is not followed."""
        found: list[cst.For] = []
        assign = self.parents.get(made)
        if made not in self.iterated_arguments or not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
            return found
        trainer = dotted_name(assign.targets[0].target)
        for call in self.training_helper_calls:
            outer = self.enclosing_loops(call)
            if trainer is None or not outer or not isinstance(call.func, cst.Attribute) or dotted_name(
                    call.func.value) != trainer or self.function_of(call) is not self.function_of(made):
                continue
            count = outer[0].target
            if isinstance(count, cst.Name) and outer[0] not in found and not self._takes_the_epoch(call, count.value):
                found.append(outer[0])
        return found

    def _takes_the_epoch(self, call: cst.Call, count: str) -> bool:
        """The method is handed the loop's count under a parameter that names an epoch
        (`trainer.training(epoch)` into `def training(self, epoch)`): it sets the epoch itself
        where it takes it (epochs.py). Handed under another name (`def run_epoch(self, ep)`), or
        where ddpify cannot read the method, the caller's loop sets it; a method ddpify cannot
        read that is handed the count is left to it."""
        handed = [(index, arg) for index, arg in enumerate(call.args) if count in names_within(arg.value)]
        if not handed:
            return False
        parameters = self.method_parameters.get(call)
        if parameters is None:
            return True
        for index, arg in handed:
            name = arg.keyword.value if arg.keyword is not None else (
                parameters[index] if index < len(parameters) and not arg.star else None)
            if name is None or ("epoch" in name.lower() and not name.lower().endswith("epochs")):
                return True
        return False

    def _loops_around_phase_picks(self, name: str, function: Optional[cst.FunctionDef]) -> list[tuple[cst.For, str]]:
        """`loader = train_loader` under `if phase == "train":` in a phase loop: the epoch
        loop is the one around the phase loop."""
        found: list[tuple[cst.For, str]] = []
        for pick in self.phase_picks().values():
            outer = self.enclosing_loops(pick.phase_loop)
            if name in pick.loaders and self.function_of(pick.phase_loop) is function and outer:
                found.append((outer[0], name))
        return found

    def phase_picks(self) -> dict[cst.For, PhasePick]:
        """Rule: the batch loops over a name that a phase loop binds to one of several
        DataLoaders, each by name (`loader = train_loader` under `if phase == "train":`,
        `loader = val_loader` otherwise, or `dl = train_dl if phase == "train" else valid_dl`),
        every binding of it in the loop's function made in that one phase loop around the
        batch loop. Which pass is a shard is the picked loader's to say (its sampler); the
        epoch loop is the loop around the phase loop."""
        if self.module in _PHASE_PICKS:  # asked once per loader and per callee followed
            return _PHASE_PICKS[self.module]
        picks: dict[cst.For, PhasePick] = _PHASE_PICKS.setdefault(self.module, {})
        holders = self.loader_holders()
        for alias, loops in self.loops_over.items():
            values = self.assigned_values.get(alias, ())
            if not any(isinstance(value, (cst.Name, cst.IfExp)) for value in values):
                continue
            for loop in loops:
                function = self.function_of(loop)
                bound = [value for value in values if self.function_of(value) is function]
                loader_names = {name for owner, name in holders if owner is function}
                named = [_loaders_named(value, loader_names) for value in bound]
                if not bound or any(names is None for names in named):
                    continue
                picked = tuple(dict.fromkeys(name for names in named if names for name in names))
                phase_loops = {self.enclosing_loops(value)[0] if self.enclosing_loops(value) else None
                               for value in bound}
                phase_loop = phase_loops.pop() if len(phase_loops) == 1 else None
                if len(picked) > 1 and phase_loop is not None and phase_loop in self.enclosing_loops(loop):
                    picks[loop] = PhasePick(alias, picked, phase_loop)
        return picks

    def loop_trains(self, loop: cst.For) -> bool:
        """The loop's body trains, itself or through a function it calls."""
        return loop in self.training_loops or loop in self.loops_calling_training

    def keys_trained(self, dict_pass: DictPass) -> Union[set[str], str]:
        """The keys for which a pass over a dict of loaders trains: the branches that call
        backward() or step() under `if phase == "train":` (or `!=`, `in`, `else`) say which,
        whatever the keys are called. A string says why it cannot be told."""
        if not self.loop_trains(dict_pass.loop):
            return set()
        calls = [call for call in self.training_calls if dict_pass.loop in self.enclosing_loops(call)]
        if not calls:
            return "its loop trains through a function ddpify does not follow"
        if dict_pass.key_variable is None:
            return set(dict_pass.keys)
        trained: set[str] = set()
        for call in calls:
            keys = self._keys_reaching(call, dict_pass)
            if isinstance(keys, str):
                return keys
            trained |= keys
        return trained

    def _keys_reaching(self, call: cst.Call, dict_pass: DictPass) -> Union[set[str], str]:
        """The keys for which the branches around `call`, up to the pass's loop, run it."""
        variable = dict_pass.key_variable
        assert variable is not None
        derived = {name for name, values in self.assigned_values.items()
                   if name != variable and any(variable in names_in(value) for value in values)}
        keys = set(dict_pass.keys)
        child: cst.CSTNode = call
        parent = self.parents.get(call)
        while parent is not None and parent is not dict_pass.loop:
            if isinstance(parent, cst.If) and child in (parent.body, parent.orelse):
                test = self._flag_value(parent.test, dict_pass)
                mentioned = names_in(test)
                if mentioned & derived:
                    return (f"training is decided by `{sorted(mentioned & derived)[0]}`, which ddpify "
                            f"cannot read as a key of `{dict_pass.holder}`")
                allowed = keys_where(test, variable, set(dict_pass.keys), child is parent.body)
                if allowed is None:
                    return (f"ddpify cannot tell which keys of `{dict_pass.holder}` "
                            f"`if {self.module.code_for_node(parent.test)}:` trains")
                keys &= allowed
            child, parent = parent, self.parents.get(parent)
        return keys

    def _flag_value(self, test: cst.BaseExpression, dict_pass: DictPass) -> cst.BaseExpression:
        """`if is_train:` where `is_train = phase == "train"` is set once, in the loop that
        picks the key: the test it stands for (`not is_train` too)."""
        negated = isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not)
        flag = test.expression if isinstance(test, cst.UnaryOperation) and negated else test
        values = self.assigned_values.get(flag.value, []) if isinstance(flag, cst.Name) else []
        if len(values) != 1 or dict_pass.key_loop is None or dict_pass.key_loop not in self.enclosing_loops(values[0]):
            return test
        value = values[0]
        return cst.UnaryOperation(operator=cst.Not(), expression=value) if negated else value

    def batch_loops_without_loader(self) -> list[cst.For]:
        """Innermost training loops that iterate no DataLoader: batches built by hand."""
        holders = self.loader_holders()
        outer = {enclosing for loop in self.training_loops for enclosing in self.enclosing_loops(loop)}
        found: list[cst.For] = []
        external = self._holders([(each.function, each.name) for each in self.external_loaders])
        in_one_expression = self._loops_holding_passes_in_one_expression(holders | external) \
            if self.comprehension_passes else set()
        for loop in self.training_loops - outer - in_one_expression:
            # A loop inside the pass over a loader (one step per model of an ensemble, per
            # optimizer of a GAN) takes its batch from that pass.
            if not any(self._iterates_a_loader(each, holders, external)
                       for each in [loop, *self.enclosing_loops(loop)]):
                found.append(loop)
        return sorted(found, key=self.line_of)

    def _iterates_a_loader(self, loop: cst.For, holders: set[Holder], external: set[Holder]) -> bool:
        """The loop goes over a loader built here, or one another module builds (external)."""
        if loop in self.external_inline_loaders:
            return True
        if self.batches_from_project_loaders and any(
                call in self.batches_from_project_loaders for call in calls_within(loop.body)):
            return True  # `x, y = batches.get_batch()`: drawn from loaders another module shards
        function = self.function_of(loop)
        # (A module-level name a function reads without binding it is the module's loader.)
        if any((function, name) in external or (None, name) in external and not self.binds_locally(
                function, name) or name.startswith("self.") and any(
                held == name for _, held in external) for name in self.names_iterated_by(loop)):
            return True
        return any((function, name) in holders or (None, name) in holders and not self.binds_locally(
            function, name) or (name.startswith("self.") and any(
            held == name for _, held in holders)) for name in self.names_iterated_by(loop))

    def _loops_around_calls_of(self, function: Optional[cst.FunctionDef],
                               name: str) -> list[tuple[cst.For, str]]:
        found: list[tuple[cst.For, str]] = []
        for call in self.calls_of(function):
            outer = self.enclosing_loops(call)
            name_there = self._attribute_seen_by(call, name)
            if outer and name_there is not None:
                found.append((outer[0], name_there))
        return found

    def _attribute_seen_by(self, call: cst.Call, name: str) -> Optional[str]:
        """Rule: `self.train_loader` of a method, called once per epoch as `trainer.training(
        epoch)` from main()'s loop, is `trainer.train_loader` there (`self` means nothing in
        main); from another method (`self.training(epoch)`) it stays `self.train_loader`. None
        where the object has no name (`Trainer(args).training(epoch)`)."""
        if not name.startswith("self."):
            return name
        receiver = dotted_name(call.func.value) if isinstance(call.func, cst.Attribute) else None
        if receiver is None:
            return None
        return receiver + name[len("self"):]

    def training_loop_around(self, node: cst.CSTNode) -> Optional[cst.For]:
        """The innermost training loop (header or body) that holds node, within its function."""
        current = self.parents.get(node)
        while current is not None and not isinstance(current, (cst.FunctionDef, cst.ClassDef)):
            if isinstance(current, cst.For) and current in self.training_loops:
                return current
            current = self.parents.get(current)
        return None

    def first_training_call_in(self, function: Optional[cst.FunctionDef],
                               after: Optional[cst.CSTNode] = None) -> Optional[cst.Call]:
        """The first call in `function` (None: the module) that trains: backward(), an
        optimizer's step(), a call of a function that trains; None when it trains nowhere.
        `after`: only calls that start after this node (training that comes before a model
        is built trains another model)."""
        calls: list[cst.Call] = [*self.training_calls, *self.training_helper_calls]
        for trainer in self.training_functions:
            calls.extend(self.calls_of(trainer))
        here = [call for call in calls if self.function_of(call) is function
                and (after is None or self.start_of(call) > self.start_of(after))]
        return min(here, key=self.start_of, default=None)


def note_loaders_from_callers(facts: Facts, wrappers: Mapping[Holder, list[str]]) -> None:
    """In a helper module (facts.library), a training loop over a value its caller hands in
    (`def train(self): for x, y in self.loader`, `Solver(loader, ...)`) goes over the
    caller's DataLoader, which the caller's module shards: only set_epoch is this module's.
    A name bound to an iteration wrapper of those values (`data_zip = enumerate(zip(src,
    tgt))`) is no loader: the loaders it wraps are."""
    for loop in facts.batch_loops_without_loader():
        function = facts.function_of(loop)
        # `for step in range(self.steps)`: a count, whatever the caller handed in for it (not
        # `range(len(self.loader))`, whose loader the loop may draw from with next()).
        ranges = [call for call in calls_within(loop.iter) if dotted_name(call.func) == "range"]
        sized = {name for call in ranges for inner in calls_within(call) if dotted_name(inner.func) == "len"
                 for name in names_within(inner)}
        counted = {name for call in ranges for name in names_within(call)} - sized
        for name in facts.names_iterated_by(loop):
            # (`self` is named by `next(self.it)`: the object, not what it iterates.)
            # (`data_loader = tqdm(data_loader)`: the name wraps itself, the loader handed in.)
            wrapped = wrappers.get((function, name))
            if function is None or name in ("self", "cls") or name in counted or wrapped and name not in wrapped \
                    or not handed_in(facts, function, name):
                continue
            keys = facts.entry_keys_taken(loop, name)
            if keys is None:
                receiver, received = _handed_down_from(facts, function, name)
                if any(known.function is receiver and known.name == received for known in facts.external_loaders):
                    continue
                facts.external_loaders.append(ExternalLoader(received, receiver, receiver, loop, "its caller"))
            elif not any(received.name == name for received in facts.external_loader_dicts):
                # `for x, y in self.loaders["train"]`: a dict of loaders the caller's module
                # builds; whichever entries it shards get their epochs here (loader_dicts.py).
                facts.external_loader_dicts.append(ExternalLoaderDict(
                    name, function, function, loop, "its caller", dict.fromkeys(keys, True)))


def _handed_down_from(facts: Facts, function: cst.FunctionDef, name: str,
                      depth: int = 0) -> tuple[cst.FunctionDef, str]:
    """(function, parameter) by which a loader handed to `function` comes into this module:
    `def train(model, train_loader, epochs): for epoch in range(epochs): train_step(model,
    train_loader)` hands its own parameter down to `train_step`, whose pass over `dataloader`
    is a pass over train's `train_loader`, so the epoch loop around it is train's. Rule: the
    parameter is followed up while every call of the function in this module passes it a
    parameter of the one calling function (the same one each time); otherwise the function
    itself receives it."""
    calls = facts.calls_of(function)
    if depth > 3 or not calls:
        return function, name
    handed: set[tuple[cst.FunctionDef, str]] = set()
    for call in calls:
        caller = facts.function_of(call)
        argument = handed_for(call, function, name)
        held = dotted_name(argument) if argument is not None else None
        if caller is None or held is None or held not in parameter_names(caller):
            return function, name
        handed.add((caller, held))
    if len(handed) != 1:
        return function, name
    caller, held = handed.pop()
    return _handed_down_from(facts, caller, held, depth + 1)


def note_entries_of_received_dicts(facts: Facts) -> None:
    """`train_loader = loaders["train"]` (or `train_dl, val_dl = loaders["train"],
    loaders["val"]`) where `loaders` is a dict of DataLoaders another module of the project
    builds: the name holds that module's loader, like a loader it returns by name
    (ExternalLoader), so its epoch is set where this module loops over it."""
    assigns = facts.nodes_of(cst.Assign) if facts.external_loader_dicts else []
    for received in facts.external_loader_dicts:
        for assign in assigns:
            if len(assign.targets) != 1:
                continue
            for bound, given in assignment_pairs(assign.targets[0].target, assign.value):
                name = dotted_name(bound)
                key = literal_entry(given, received.name)
                if name is None or key not in received.sharded \
                        or not facts.sees_value(assign, received.name, received.function):
                    continue
                facts.external_loaders.append(ExternalLoader(
                    name, facts.function_of(assign), facts.statement_of(assign), given, received.made_by))
                if not received.sharded[key]:
                    facts.whole_entries[name] = f'{received.name}["{key}"]'


def note_models_moved_here(facts: Facts) -> None:
    """In a helper module, `self.model = model.to(device)` (or `kwargs["model"].to(...)`) on a
    model its caller hands in: the model reaches its device here, and is wrapped here. A
    model is what the class runs or trains (`self.model(x)`, `self.model.train()`)."""
    called = {callee for callee in facts.calls_by_callee if callee.startswith("self.") and callee.count(".") == 1}
    known = {model.name for model in facts.models}
    for function, assigned in facts.self_assignments.items():
        if _in_a_dataset_class(facts, function):
            continue
        for target, values in assigned.items():
            if target not in known and target not in called | facts.module_attributes:
                continue
            for value in values:
                if _moves_handed_in(facts, function, value):
                    # Known already when an optimizer trains it (`SGD(self.model.parameters())`):
                    # moved here all the same, so wrapped here, not by the caller, which leaves
                    # the wrap to the class that moves what it is handed.
                    facts.models_moved_here.add(target)
                    if target not in known:
                        known.add(target)
                        facts.models.append(Model(target, facts.statement_of(value), function))
                    break
    # `self.model = model` and then `self.model.to(self.device)` as a statement of its own
    # (BaseTrainer.__init__): the model its caller hands in reaches its device at that
    # statement, and is wrapped after it (known already when its optimizer is built here).
    for callee, calls in sorted(facts.calls_by_callee.items()):
        target, _, method = callee.rpartition(".")
        if method not in ("to", "cuda") or target in facts.models_moved_here \
                or target not in called | facts.module_attributes:
            continue
        for call in calls:
            mover = facts.function_of(call)
            if mover is None or not isinstance(facts.parents.get(call), cst.Expr) \
                    or not handed_in(facts, mover, target) or _in_a_dataset_class(facts, mover):
                continue
            facts.models[:] = [model for model in facts.models if model.name != target]
            facts.models.append(Model(target, facts.statement_of(call), mover))
            facts.models_moved_here.add(target)
            break
    _note_parameters_moved_here(facts)
    _note_models_trained_by_derived_classes(facts)


def _note_models_trained_by_derived_classes(facts: Facts) -> None:
    """Rule: `self.model = self._build_model().to(self.device)` in `Exp_Basic.__init__`, and
    `Exp_Main(Exp_Basic)`, in another module of the project, builds the optimizer over
    `self.model.parameters()` and trains it without moving it: the model reaches its device
    here, so it is wrapped here, after the move (the subclass's module leaves the wrap to this
    one, facts.wrapped_in_bases there)."""
    known = {model.name for model in facts.models}
    for function, assigned in facts.self_assignments.items():
        owner = facts.class_of(function)
        trained = facts.trained_in_derived.get(owner.name.value, set()) if owner is not None else set()
        for target, values in assigned.items():
            if target in known or target[len("self."):] not in trained:
                continue
            moving = [value for value in values if _moved_in_chain(value)]
            if moving:
                known.add(target)
                facts.models.append(Model(target, facts.statement_of(moving[0]), function))
                facts.models_moved_here.add(target)
    for callee, calls in sorted(facts.calls_by_callee.items()):
        target, _, method = callee.rpartition(".")
        if method not in ("to", "cuda") or target in known or target[len("self."):] not in {
                attribute for attributes in facts.trained_in_derived.values() for attribute in attributes}:
            continue
        for call in calls:
            mover = facts.function_of(call)
            owner = facts.class_of(mover)
            if owner is None or target[len("self."):] not in facts.trained_in_derived.get(owner.name.value, set()):
                continue
            known.add(target)
            facts.models.append(Model(target, facts.statement_of(call), mover))
            facts.models_moved_here.add(target)
            break


def _moved_in_chain(value: cst.BaseExpression) -> bool:
    """`Net().to(device)`, `self._build_model().to(self.device)`, `Net().cuda().eval()`."""
    while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value in (
            "to", "cuda", "train", "eval", "float", "double", "half", "bfloat16"):
        if value.func.attr.value in ("to", "cuda"):
            return True
        value = value.func.value
    return False


def _in_a_dataset_class(facts: Facts, function: cst.FunctionDef) -> bool:
    """Rule: a Dataset (map-style or iterable) that is handed a module and moves it to its
    device (`self.transformation = transformation.to(device)`: a spectrogram, a fixed
    feature extractor) runs it to make samples, in every rank's own loader: a data
    transform, not a model trained here, so it is never wrapped (DDP refuses a module with
    no parameter that needs a gradient, and a wrap would sync nothing a step uses)."""
    owner = facts.class_of(function)
    return owner is not None and owner.name.value in facts.dataset_classes | facts.iterable_dataset_classes


def _note_parameters_moved_here(facts: Facts) -> None:
    """Rule: `def train(model, loader, device): model.to(device)` and then the training (a
    step, or a call of a function that trains), in a helper module: the model its caller
    hands in reaches its device at that statement, so it is wrapped there, after the move;
    the caller, seeing the move, leaves the wrap to this function (else neither would wrap
    it, and every rank would train its own copy). A device move whose result is dropped is
    a module's (a tensor's `.to()` changes nothing in place); a function that only
    evaluates what it moves is not one that wraps."""
    for callee, calls in sorted(facts.calls_by_callee.items()):
        target, _, method = callee.rpartition(".")
        if method not in ("to", "cuda") or not target or "." in target:
            continue
        for call in calls:
            mover = facts.function_of(call)
            if mover is None or not isinstance(facts.parents.get(call), cst.Expr) \
                    or target not in parameter_names(mover) or (mover, target) in facts.parameters_moved_here \
                    or facts.first_training_call_in(mover, call) is None:
                continue
            facts.models[:] = [model for model in facts.models
                               if model.name != target or model.function is not mover]
            facts.models.append(Model(target, facts.statement_of(call), mover))
            facts.parameters_moved_here.add((mover, target))


def _moves_handed_in(facts: Facts, function: cst.FunctionDef, value: cst.BaseExpression) -> bool:
    if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
            and value.func.attr.value in ("to", "cuda")):
        return False
    receiver = value.func.value
    if isinstance(receiver, cst.Subscript) and isinstance(receiver.value, cst.Name):
        return receiver.value.value in parameter_names(function) | _star_keywords(function)
    name = dotted_name(receiver)
    return name is not None and handed_in(facts, function, name)


def _star_keywords(function: cst.FunctionDef) -> set[str]:
    star = function.params.star_kwarg
    return {star.name.value} if star is not None else set()


def handed_in(facts: Facts, function: cst.FunctionDef, name: str, depth: int = 0) -> bool:
    """The value comes from a parameter: directly, through `self.x = x` in another method,
    or through a local name assigned only such values."""
    if depth > 3 or name == receiver_of(facts, function):
        return False
    if name.startswith("self."):
        values = [value for assigned in facts.self_assignments.values() for value in assigned.get(name, ())]
        if not values and name in facts.inherited_from_parameters:
            return True  # set by a base class of another module from what its caller handed in
        return bool(values) and all(
            _value_handed_in(facts, method, value, depth + 1, kept_on_self=True)
            for method, assigned in facts.self_assignments.items() for value in assigned.get(name, ()))
    if name in parameter_names(function):
        return True
    values = [value for value in facts.assigned_values.get(name, ()) if facts.function_of(value) is function]
    return bool(values) and all(_value_handed_in(facts, function, value, depth + 1) for value in values)


def receiver_of(facts: Facts, function: cst.FunctionDef) -> Optional[str]:
    """The first parameter of a method (`self`, `cls`): the object the method runs on, not a
    value a caller hands in. Inside an nn.Module's own methods `self` is the module itself,
    never its DDP wrapper, so nothing read through it goes through `.module`."""
    if facts.class_of(function) is None or any(
            isinstance(decorator.decorator, cst.Name) and decorator.decorator.value == "staticmethod"
            for decorator in function.decorators):
        return None
    parameters = positional_parameters(function)
    return parameters[0] if parameters else None


# Methods that return the module they are called on, moved or in another mode.
_MOVES_AND_MODES = frozenset({"to", "cuda", "cpu", "train", "eval", "float", "double", "half", "bfloat16"})


def _value_handed_in(facts: Facts, function: cst.FunctionDef, value: cst.BaseExpression, depth: int,
                     kept_on_self: bool = False) -> bool:
    """A name handed in, or a call that wraps one (`inf_loop(loader)`, `tqdm(loader)`).
    `kept_on_self`: the value is kept on an attribute (`self.train_loader = ...`)."""
    if isinstance(value, cst.Call):
        if isinstance(value.func, cst.Name) and value.func.value in ("iter", "next"):
            return False  # an iterator over the loader: its restarts are the loader's passes
        if isinstance(value.func, cst.Attribute) and value.func.attr.value in _MOVES_AND_MODES and isinstance(
                value.func.value, cst.Call):
            return False  # `Net().to(device)`: a module made here, whatever device it is handed
        if _makes_a_layer(facts, value):
            return False  # `nn.Embedding(vocab_size, dim)`: a layer made here from sizes handed in
        return any(not arg.star and arg.keyword is None and _value_handed_in(facts, function, arg.value, depth)
                   for arg in value.args[:1])
    if isinstance(value, cst.IfExp):
        # `self.tr_loader if not cross_valid else self.cv_loader`: either is handed in.
        return _value_handed_in(facts, function, value.body, depth) and _value_handed_in(
            facts, function, value.orelse, depth)
    keys = (cst.SimpleString, cst.Integer) if kept_on_self else (cst.SimpleString,)
    if isinstance(value, cst.Subscript) and len(value.slice) == 1 and isinstance(value.slice[0].slice, cst.Index) \
            and isinstance(value.slice[0].slice.value, keys):
        # `data["tr_loader"]` of a dict the caller hands in, or, kept on the object,
        # `self.train_loader = data_loader[0]` of a tuple (`Trainer(config, (train_loader,
        # valid_loader))`): the caller's loader. (`master = modules[0]` of a list is no such
        # part of the object.)
        return _value_handed_in(facts, function, value.value, depth)
    name = dotted_name(value)
    return name is not None and handed_in(facts, function, name, depth)



def _makes_a_layer(facts: Facts, call: cst.Call) -> bool:
    """A layer class of torch.nn (`nn.Embedding(vocab_size, dim)`, `nn.Sequential(...)`):
    the module it makes is new, never the caller's model nor its DDP wrapper, whatever sizes
    or parts it is handed. Not DataParallel or DDP around a model handed in, nor torch.nn.utils'
    wrappers that hand the module back (`spectral_norm(conv)`)."""
    return any(call in calls for qualified, calls in facts.calls_named.items()
               if qualified.startswith("torch.nn.") and qualified[len("torch.nn."):][:1].isupper()
               and qualified not in DATA_PARALLEL and qualified not in DISTRIBUTED_DATA_PARALLEL)


def mark_loops_calling_training_functions(facts: Facts, training_calls: list[cst.Call]) -> None:
    """A loop that calls a function or method that trains (`self._run_batch(x, y)`, whose
    body calls backward) trains too, and so does the function around it, in turn."""
    training = functions_of(facts, training_calls)
    # A function that takes one step (`train_step(model, x, y)`: backward, no loop of its
    # own) makes the loop around each of its calls a training loop, as if inlined.
    step_functions = functions_of(facts, [call for call in training_calls if not facts.enclosing_loops(call)])
    for function in step_functions:
        for call in facts.calls_of(function):
            facts.training_loops.update(facts.enclosing_loops(call)[:1])
    mark_passes_handed_a_step(facts, training)
    facts.training_functions = training
    _mark_loader_loops_calling_training_helpers(facts)
    pending = list(training)
    while pending:
        function = pending.pop()
        for call in facts.calls_of(function):
            facts.loops_calling_training.update(facts.enclosing_loops(call))
            caller = facts.function_of(call)
            if caller is not None and caller not in training:
                training.add(caller)
                pending.append(caller)
    _mark_loops_pulling_training_generators(facts, training)


def _mark_loops_pulling_training_generators(facts: Facts, training: set[cst.FunctionDef]) -> None:
    """Rule: `for step, loss in enumerate(train_steps(model, loader, optimizer)):`, a function
    that trains (of this file, or of another module of the project) called in the header of
    a loop, through enumerate(), zip() or a progress bar: a generator steps each time the loop
    pulls a batch, so the loop trains and the loader handed in the header is a training one.
    (Its header is outside its body, where enclosing_loops looks.)"""
    calls = [*facts.training_helper_calls, *(call for function in training for call in facts.calls_of(function))]
    for call in calls:
        child: cst.CSTNode = call
        parent = facts.parents.get(call)
        while isinstance(parent, (cst.Arg, cst.Call)) and not (isinstance(parent, cst.Call) and parent.func is child):
            child, parent = parent, facts.parents.get(parent)
        if isinstance(parent, cst.For) and parent.iter is child:
            facts.loops_calling_training.add(parent)


def _mark_loader_loops_calling_training_helpers(facts: Facts) -> None:
    """`for x, y in loader: trainer.train_step(x, y)`, where the step (backward, optimizer)
    is a method or function of another module of the project: the loop over the loader
    trains, as if the step were written in it. Only a loop over a loader: an epoch loop
    around `engine.train_one_epoch(model, loader)` is not a batch loop."""
    if not facts.training_helper_calls:
        return  # most scripts step in their own code: no need to find the loops over loaders
    over_loaders = {loop for loader in facts.loaders
                    for loop in facts.loops_over_values(facts.loader_holders_of(loader))}
    for call in facts.training_helper_calls:
        innermost = facts.enclosing_loops(call)[:1]
        if innermost and innermost[0] in over_loaders:
            facts.training_loops.add(innermost[0])


def functions_of(facts: Facts, calls: Iterable[cst.Call]) -> set[cst.FunctionDef]:
    """The functions the calls sit in; calls at module level have none."""
    return {function for function in map(facts.function_of, calls) if function is not None}


def reached_when_run(facts: Facts, names_in_top: dict[cst.CSTNode, set[str]],
                     called_from_elsewhere: Iterable[str] = ()) -> set[cst.CSTNode]:
    """Top-level statements that run when the file runs: module-level code, and the
    functions and classes it names, and those they name in turn. A library whose methods
    call .backward() trains nothing when imported or run, and is left alone.

    With `called_from_elsewhere` (names other modules of the project import), what those
    definitions reach instead: the part of a helper module that runs when the program does."""
    module = facts.module
    definitions = {statement.name.value: statement for statement in module.body
                   if isinstance(statement, (cst.FunctionDef, cst.ClassDef))}
    roots = set(called_from_elsewhere)
    if roots:
        pending: list[cst.CSTNode] = [definitions[name] for name in sorted(roots) if name in definitions]
    else:
        pending = [statement for statement in module.body
                   if not isinstance(statement, (cst.FunctionDef, cst.ClassDef))]
        exposing = {facts.ancestor_in(call, module) for call in facts.nodes_of(cst.Call) if _is_bare_fire(call)}
        if any(statement in exposing for statement in pending):
            pending += [definition for definition in definitions.values() if isinstance(definition, cst.FunctionDef)]
    reached: set[cst.CSTNode] = set(pending)
    while pending:
        while pending:
            for name in names_in_top.get(pending.pop(), ()):
                definition = definitions.get(name)
                if definition is not None and definition not in reached:
                    reached.add(definition)
                    pending.append(definition)
        if not roots:
            pending = _commands_of_reached_groups(definitions, reached, names_in_top)
            reached.update(pending)
    return reached


def _commands_of_reached_groups(definitions: dict[str, Union[cst.FunctionDef, cst.ClassDef]],
                                reached: set[cst.CSTNode],
                                names_in_top: dict[cst.CSTNode, set[str]]) -> list[cst.CSTNode]:
    """Rule: a function registered as a command of a click group or a typer app that runs
    (`@main.command()` under `@click.group() def main`, `@app.command()` with `app()` called)
    runs when the command line names it (`python main.py train -c cfg.yaml`), though no line
    of the file calls it: the group dispatches to it, as `fire.Fire()` does."""
    named = {name for node in reached for name in names_in_top.get(node, ())}
    named |= {name for name, definition in definitions.items() if definition in reached}
    return [definition for definition in definitions.values()
            if definition not in reached and isinstance(definition, cst.FunctionDef)
            and any(registering_group(decorator.decorator) in named for decorator in definition.decorators)]


def registering_group(decorator: cst.BaseExpression) -> Optional[str]:
    """`main` for `@main.command()`, `@main.command("test")`, `@cli.group()`, `@app.command`."""
    target = decorator.func if isinstance(decorator, cst.Call) else decorator
    if isinstance(target, cst.Attribute) and target.attr.value in ("command", "group") \
            and isinstance(target.value, cst.Name):
        return target.value.value
    return None


def _is_bare_fire(call: cst.Call) -> bool:
    """`fire.Fire()` with no argument: the command line names the function to run (`python
    train.py train --lr 0.01`), so every top-level function may run."""
    return isinstance(call.func, (cst.Name, cst.Attribute)) and (dotted_name(call.func) or "").split(".")[-1] \
        == "Fire" and not call.args


def innermost_common_block(facts: Facts, nodes: list[cst.CSTNode]) -> cst.CSTNode:
    """The deepest module or indented block that holds every node."""
    chains = [blocks_around(facts, node) for node in nodes]
    common: cst.CSTNode = facts.module
    for level in zip(*chains):
        if any(block is not level[0] for block in level):
            break
        common = level[0]
    return common


def blocks_around(facts: Facts, node: cst.CSTNode) -> list[cst.CSTNode]:
    """The blocks around a node, outermost first."""
    blocks: list[cst.CSTNode] = []
    parent = facts.parents.get(node)
    while parent is not None:
        if isinstance(parent, (cst.IndentedBlock, cst.Module)):
            blocks.append(parent)
        parent = facts.parents.get(parent)
    return blocks[::-1]


def is_training_loader(facts: Facts, loader: Loader) -> bool:
    """Does a loop over this loader train? The loader is followed wherever its value goes
    (returned, passed, stored on self); if no loop is in sight, the name and shuffle tell."""
    loops = facts.loops_over_values(facts.loader_holders_of(loader))
    if loops:
        # (A loop that trains, reached only through calls that evaluate - `run_epoch(model,
        # val_loader)` without the optimizer - does not train over this loader.)
        return any(facts.loop_trains(loop) for loop in loops) and any(
            facts.loop_trains(loop) for loop in facts.loops_over_values(facts.trained_holders_of(loader)))
    if only_peeked(facts, loader):
        return False
    name = (loader.inline or loader.name).rsplit(".", 1)[-1]
    if loader.function is not None and not has_role_word(name):
        # Rule: a loader whose own name says nothing (`loader = DataLoader(...)`, `return
        # DataLoader(...)`) takes its role from the function that builds it
        # (`def train_dataloader(params)`, `def get_val_loader(cfg)`).
        branch = _branch_words(facts, loader)
        name = f"{name} {branch}" if has_role_word(branch) else f"{name} {loader.function.name.value}"
    return trains_by_look(name, loader.shuffles or loader.kwargs_name is not None)


def only_peeked(facts: Facts, loader: Loader) -> bool:
    """Rule: `sample_loader = DataLoader(dataset, batch_size=9, shuffle=shuffle)` read only to
    draw one batch to look at, outside every loop (`images, labels = next(iter(sample_loader))`,
    or `data_iter = iter(sample_loader)` then `data_iter.next()`), and neither returned nor
    handed on: no pass over it trains, whatever its name and shuffle say."""
    function = loader.function
    if loader.inline is not None or "." in loader.name:
        return False
    reads = [node for node in facts.nodes_of(cst.Name) if node.value == loader.name
             and facts.function_of(node) is function and facts.statement_of(node) is not loader.statement]
    return bool(reads) and all(_one_draw(facts, read, function) for read in reads)


def _one_draw(facts: Facts, read: cst.Name, function: Optional[cst.FunctionDef]) -> bool:
    """`next(iter(read))`, or `it = iter(read)` whose every read is one `next(it)` or
    `it.next()` outside any loop."""
    arg = facts.parents.get(read)
    call = facts.parents.get(arg) if isinstance(arg, cst.Arg) else None
    if not isinstance(call, cst.Call) or dotted_name(call.func) != "iter" or len(call.args) != 1 \
            or facts.enclosing_loops(call):
        return False
    outer_arg = facts.parents.get(call)
    outer = facts.parents.get(outer_arg) if isinstance(outer_arg, cst.Arg) else None
    if isinstance(outer, cst.Call) and dotted_name(outer.func) == "next":
        return True
    assign = facts.parents.get(call)
    if not isinstance(assign, cst.Assign) or len(assign.targets) != 1 or not isinstance(
            assign.targets[0].target, cst.Name):
        return False
    iterator = assign.targets[0].target.value
    uses = [node for node in facts.nodes_of(cst.Name) if node.value == iterator
            and facts.function_of(node) is function and node is not assign.targets[0].target]
    return bool(uses) and all(_drawn_once(facts, use) for use in uses)


def _drawn_once(facts: Facts, use: cst.Name) -> bool:
    parent = facts.parents.get(use)
    if isinstance(parent, cst.Attribute) and parent.attr.value == "next":
        call = facts.parents.get(parent)
    else:
        arg = parent if isinstance(parent, cst.Arg) else None
        call = facts.parents.get(arg) if arg is not None else None
        if not isinstance(call, cst.Call) or dotted_name(call.func) != "next":
            return False
    return isinstance(call, cst.Call) and not facts.enclosing_loops(call)


def _branch_words(facts: Facts, loader: Loader) -> str:
    """Rule: a loader built in the branch that a split test picks (`def get_loader(root,
    mode):` with `if mode.lower() == "train": return DataLoader(...)`, `if split in ("val",
    "test"):`, `if is_train:`) plays the role that test names, whatever its shuffle: the
    strings the test compares to, or the name it tests, as the loader's own name would.
    Only the branch the test holds in is read (an `else:` is every other split)."""
    words: list[str] = []
    node: Optional[cst.CSTNode] = loader.statement
    while node is not None and node is not loader.function:
        parent = facts.parents.get(node)
        if isinstance(parent, cst.If) and node is parent.body:
            words.append(_words_tested(parent.test))
        node = parent
    return " ".join(word for word in words if word)


def _words_tested(test: cst.BaseExpression) -> str:
    """`mode == "train"` and `split in ("val", "test")`: the strings; `is_train`, `args.eval`: the name."""
    if isinstance(test, (cst.Name, cst.Attribute)):
        return dotted_name(test) or ""
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1 \
            and isinstance(test.comparisons[0].operator, (cst.Equal, cst.In)):
        strings = _strings(test.comparisons[0].comparator) or _strings(test.left)
        return " ".join(sorted(strings or ()))
    return ""


def keys_where(test: cst.BaseExpression, variable: str, keys: set[str], holds: bool) -> Optional[set[str]]:
    """The keys for which `test` is `holds` when `variable` takes them; None when the test
    reads the key in a way this cannot evaluate."""
    if variable not in names_in(test):
        return set(keys)
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return keys_where(test.expression, variable, keys, not holds)
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And) and holds:
        both = keys_where(test.left, variable, keys, True), keys_where(test.right, variable, keys, True)
        return None if both[0] is None or both[1] is None else both[0] & both[1]
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return None
    target = test.comparisons[0]
    operator, left, right = target.operator, test.left, target.comparator
    if isinstance(right, cst.Name) and right.value == variable and isinstance(operator, (cst.Equal, cst.NotEqual)):
        left, right = right, left
    if not (isinstance(left, cst.Name) and left.value == variable):
        return None
    values = _strings(right)
    if values is None:
        return None
    if isinstance(operator, (cst.Equal, cst.In)):
        matched = keys & values
    elif isinstance(operator, (cst.NotEqual, cst.NotIn)):
        matched = keys - values
    else:
        return None
    return matched if holds else keys - matched


def _strings(node: cst.BaseExpression) -> Optional[set[str]]:
    """A string literal, or a list, tuple or set of them."""
    single = string_value(node)
    if single is not None:
        return {single}
    if isinstance(node, (cst.List, cst.Tuple, cst.Set)):
        values = {string_value(element.value) for element in node.elements}
        return None if None in values else {value for value in values if value is not None}
    return None


def _loaders_named(value: cst.BaseExpression, loader_names: set[str]) -> Optional[list[str]]:
    """`train_loader` (a DataLoader's name), or a conditional expression choosing between
    such names; None for anything else."""
    if isinstance(value, cst.IfExp):
        body = _loaders_named(value.body, loader_names)
        orelse = _loaders_named(value.orelse, loader_names)
        return None if body is None or orelse is None else body + orelse
    if isinstance(value, cst.Name) and value.value in loader_names:
        return [value.value]
    return None
