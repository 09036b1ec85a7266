"""Value flow: where a loader or a model goes from the name it was built under, through
returns, call arguments and `self.` attributes."""
from collections.abc import Iterable, Iterator, Mapping
from typing import Literal, Optional, Union, cast, overload

import libcst as cst

from ddpify.analysis import effects, memo
from ddpify.analysis.call_modes import evaluating_call
from ddpify.analysis.facts import DictPass, ExternalLoader, Holder, Loader, LoaderDict, Model, Statement
from ddpify.analysis.navigation import Navigation
from ddpify.analysis.nodes import (
    assigned_names,
    calls_within,
    dotted_name,
    find_all,
    handed_for,
    names_bound_in,
    names_within,
    positional_parameters,
    returned_name,
    string_value,
    unmoved,
)

# Main guards of helper modules, and whether each is a demo that trains nothing.
_DEMO_GUARDS = memo.per_migration_store()


class ValueFlow(Navigation):
    def loader_holders(self) -> set[Holder]:
        """(function, name) pairs that hold a DataLoader: where it is built, and every
        parameter it is passed to and variable it is returned into."""
        return self._holders([(loader.function, loader.name) for loader in self.loaders])

    def model_holders(self, model: "Model") -> set[Holder]:
        """Where a model's value goes: returned, passed on, stored on self."""
        return self._holders([(model.function, model.name)])

    def loader_holders_of(self, loader: Loader) -> set[Holder]:
        return self._holders([(loader.function, loader.name)])

    def trained_holders_of(self, loader: Loader) -> set[Holder]:
        """Where the loader goes, not through a call that evaluates (call_modes.py:
        `run_epoch(model, val_loader)` of a function that trains when handed an optimizer)."""
        return self._holders([(loader.function, loader.name)], through_evaluating_calls=False)

    def holders_from(self, function: Optional[cst.FunctionDef], name: str) -> set[Holder]:
        """Where the value `name` holds in `function` goes from there."""
        return self._holders([(function, name)])

    def loops_over_values(self, holders: Iterable[Holder]) -> list[cst.For]:
        """The for loops that iterate one of these held values, in source order: holders
        come as a set, and the first loop decides which reason a report gives."""
        loops = {loop for function, name in holders for loop in self.loops_over.get(name, ())
                 if self.sees_value(loop, name, function)}
        return sorted(loops, key=self.start_of)

    def _holders(self, work: list[Holder], through_evaluating_calls: bool = True) -> set[Holder]:
        holders: set[Holder] = set()
        while work:
            function, name = work.pop()
            if (function, name) in holders:
                continue
            holders.add((function, name))
            work.extend((caller, holder) for holder, caller in self._returned_to(name, function))
            work.extend((callee, parameter)
                        for callee, parameter, call in self._calls_passing(name, function)
                        if through_evaluating_calls or not evaluating_call(
                            self, callee, call, self._callee(dotted_name(call.func) or "", call)[1]))
            work.extend((function, attribute) for attribute in self.stored_in_self(name, function))
        return holders

    def loader_dicts(self) -> list[LoaderDict]:
        """Dicts whose entries are DataLoaders built right there, by string key."""
        loader_calls = set(self.loader_calls)
        found: list[LoaderDict] = []
        for name, values in self.assigned_values.items():
            for value in values:
                entries, variable, names = _loader_entries(value, loader_calls)
                function = self.function_of(value)
                named = {key: loader for key, held in names.items() if held
                         for loader in self.loaders if (function, held) in self.loader_holders_of(loader)}
                entries.update((key, loader.call) for key, loader in named.items())
                if entries:
                    order = [key for key in [*names, *entries] if key in entries]  # the dict's
                    found.append(LoaderDict(name, value, self.statement_of(value), function,
                                            {key: entries[key] for key in dict.fromkeys(order)}, variable, named))
        found.extend(self._returned_loader_dicts(loader_calls))
        found.extend(self._loop_filled_loader_dicts(loader_calls))
        return sorted(found, key=lambda loaders: self.start_of(loaders.value))

    def _loop_filled_loader_dicts(self, loader_calls: set[cst.Call]) -> Iterator[LoaderDict]:
        """`loaders = {}`, then `for split in ["train", "val", "test"]:` whose pass builds one
        DataLoader (`dl = DataLoader(ds, shuffle=(split == "train"))`, under a filter such as
        `if split in types:` or not) and stores it by the loop's key (`loaders[split] = dl`):
        the comprehension's dict, filled a key a pass. It goes by the name that holds it where
        it is used: its own, or the one its function's single call site assigns it to."""
        for assign in find_all(self.module, cst.Assign):
            target = assign.targets[0].target if len(assign.targets) == 1 else None
            if not (isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name)
                    and len(target.slice) == 1 and isinstance(target.slice[0].slice, cst.Index)
                    and isinstance(target.slice[0].slice.value, cst.Name)):
                continue
            key_variable = target.slice[0].slice.value.value
            key_loop = next((loop for loop in self.enclosing_loops(assign) if isinstance(loop.target, cst.Name)
                             and loop.target.value == key_variable), None)
            keys = _literal_strings(key_loop.iter) if key_loop is not None else None
            function = self.function_of(assign)
            name = target.value.value
            if key_loop is None or keys is None or self.function_of(key_loop) is not function \
                    or not any(isinstance(value, cst.Dict) and not value.elements
                               for value in self.assigned_values.get(name, ())):
                continue
            call, loader = self._built_in_pass(assign.value, key_loop, loader_calls)
            if call is None:
                continue
            holder = self._held_where_used(name, function)
            if holder is not None:
                yield LoaderDict(holder[1], call, self.statement_of(call), holder[0], dict.fromkeys(keys, call),
                                 key_variable, {}, loader)

    def _built_in_pass(self, value: cst.BaseExpression, key_loop: cst.For, loader_calls: set[cst.Call]
                       ) -> tuple[Optional[cst.Call], Optional[Loader]]:
        """The DataLoader call a dict entry stores: the value itself, or the loader named once
        in the same pass (`dl = DataLoader(...)`)."""
        if value in loader_calls:
            return cast(cst.Call, value), None
        if not isinstance(value, cst.Name):
            return None, None
        named = [loader for loader in self.loaders if loader.name == value.value
                 and key_loop in self.enclosing_loops(loader.call)]
        if len(named) != 1 or len(self.assigned_values.get(value.value, ())) != 1:
            return None, None
        return named[0].call, named[0]

    def _held_where_used(self, name: str, function: Optional[cst.FunctionDef]
                         ) -> Optional[tuple[Optional[cst.FunctionDef], str]]:
        """The dict's own name, or, returned from its function (`return loaders`), the name its
        one call site assigns it to; None for a dict several call sites share."""
        if function is None or not any(isinstance(returned.value, cst.Name) and returned.value.value == name
                                       for returned in self.own_statements(function, cst.Return)):
            return function, name
        sites = self.calls_of(function)
        if len(sites) != 1 or self.enclosing_loops(sites[0]):
            return None
        assign = self.parents.get(sites[0])
        if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
            return None
        holder = dotted_name(assign.targets[0].target)
        return None if holder is None else (self.function_of(sites[0]), holder)

    def _returned_loader_dicts(self, loader_calls: set[cst.Call]) -> Iterator[LoaderDict]:
        """`return {"train": DataLoader(...), "val": DataLoader(...)}` in a function whose
        one call site names what it returns (`self.loaders = self._make_loaders()`): the dict
        goes by that name, there; with no call site here, by the function's return. A dict
        of several call sites stays DDP218's: one sampler
        edit in the dict would serve callers ddpify would have to follow each."""
        for function in dict.fromkeys(self.functions.values()):
            for returned in self.own_statements(function, cst.Return):
                if returned.value is None:
                    continue
                entries, variable, names = _loader_entries(returned.value, loader_calls)
                if not entries or any(names.values()):
                    continue
                sites = self.calls_of(function)
                if not sites:
                    # Called from another module, or from nothing ddpify sees: it goes by the
                    # function's return (rules/loader_dicts.py, `_plan_handed_out`).
                    yield LoaderDict(returned_name(function), returned.value, self.statement_of(returned), function,
                                     entries, variable, {})
                    continue
                if len(sites) != 1 or self.enclosing_loops(sites[0]):
                    continue  # (a dict made anew in a loop: set_epoch would reach the last one)
                assign = self.parents.get(sites[0])
                if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
                    continue
                holder = dotted_name(assign.targets[0].target)
                if holder is None:
                    continue
                yield LoaderDict(holder, returned.value, self.statement_of(returned), self.function_of(sites[0]),
                                 entries, variable, {})

    def dict_passes(self, loaders: LoaderDict) -> Union[list[DictPass], str]:
        """Every loop over the batches of one of the dict's entries, wherever the dict goes
        (passed to a function, returned); a string says which use ddpify cannot follow."""
        keys = tuple(loaders.entries)
        passes: list[DictPass] = []
        holders = sorted(self.holders_from(loaders.function, loaders.name),
                         key=lambda held: (self.start_of(held[0]) if held[0] else (0, 0), held[1]))
        for function, name in holders:
            for loop in self.loops_over.get(name, ()):
                if not self.sees_value(loop, name, function):
                    continue
                found = self._passes_in(loop, name, keys)
                if isinstance(found, str):
                    return found
                passes.extend(found)
            passes.extend(self._entries_handed_on(name, function, keys))
        return sorted(passes, key=lambda each: self.start_of(each.loop))

    def _entries_handed_on(self, name: str, function: Optional[cst.FunctionDef],
                           keys: tuple[str, ...]) -> Iterator[DictPass]:
        """`train_one_epoch(model, loaders["train"], ...)`: an entry by literal key handed to a
        function of this file, whose loops over that parameter are passes over the entry."""
        handed = [(callee, parameter, call, key)
                  for callee, parameter, call, key in self._calls_passing(name, function, entries=True)]
        handed += [(callee, parameter, call, key) for alias, key in self._entry_aliases(name, function, keys)
                   for callee, parameter, call in self._calls_passing(alias, function)]
        for callee, parameter, call, key in handed:
            if key not in keys:
                continue
            for loop in self.loops_over.get(parameter, ()):
                if self.function_of(loop) is callee:
                    yield DictPass(loop, name, (key,), None, handed_by=call)
            # One function further (cs230's train_and_evaluate(model, train_dl, ...) counts the
            # epochs and hands the loader on to train(model, optimizer, dataloader)): the epochs
            # are counted around that inner call, where the entry goes by the parameter's name.
            for inner, inner_parameter, inner_call in self._calls_passing(parameter, callee):
                if inner is callee:
                    continue
                for loop in self.loops_over.get(inner_parameter, ()):
                    if self.function_of(loop) is inner:
                        yield DictPass(loop, name, (key,), None, handed_by=inner_call, handed_as=parameter)

    def _entry_aliases(self, name: str, function: Optional[cst.FunctionDef],
                       keys: tuple[str, ...]) -> Iterator[tuple[str, str]]:
        """Rule: `train_dl = loaders["train"]`, the name's only assignment in the function that
        holds the dict, is the entry under another name (cs230: then `train_and_evaluate(model,
        train_dl, val_dl, ...)`): a call of a function of this file handing the alias on hands
        it the entry, and that function's loops over its parameter are passes over the entry.
        A name assigned anything else as well in that function is not followed."""
        for alias, values in self.assigned_values.items():
            own = [value for value in values if self.function_of(value) is function]
            key = literal_entry(own[0], name) if len(own) == 1 and alias != name else None
            if key is not None and key in keys:
                yield alias, key

    def _passes_in(self, loop: cst.For, name: str, keys: tuple[str, ...]) -> Union[list[DictPass], str]:
        iterated = _unwrapped(loop.iter, name)
        if dotted_name(iterated) == name:
            return []  # `for phase in loaders:` goes over the keys; the passes are the loops inside
        if isinstance(iterated, cst.Call) and dotted_name(iterated.func) == f"{name}.keys":
            return []
        if isinstance(iterated, cst.Subscript) and dotted_name(iterated.value) == name:
            index = iterated.slice[0].slice if len(iterated.slice) == 1 else None
            key = index.value if isinstance(index, cst.Index) else None
            literal = string_value(key) if key is not None else None
            if literal in keys:
                return [DictPass(loop, name, (literal,), None)]
            if isinstance(key, cst.Name):
                key_loop = next((outer for outer in self.enclosing_loops(loop)
                                 if isinstance(outer.target, cst.Name) and outer.target.value == key.value), None)
                domain = _literal_strings(key_loop.iter) if key_loop is not None else None
                taken = tuple(k for k in keys if domain is None or k in domain)
                return [DictPass(loop, name, taken, key.value, key_loop)]
            return f"`{self.module.code_for_node(iterated)}` picks an entry ddpify cannot name"
        if (isinstance(iterated, cst.Call) and isinstance(iterated.func, cst.Attribute)
                and dotted_name(iterated.func.value) == name and iterated.func.attr.value in ("items", "values")):
            target = loop.target
            if iterated.func.attr.value == "items":
                pair = target.elements if isinstance(target, cst.Tuple) and len(target.elements) == 2 else None
                if pair is None or not all(isinstance(element.value, cst.Name) for element in pair):
                    return f"the loop over `{name}.items()` takes its entries in a form ddpify cannot read"
                key_name, loader_name = (cast(cst.Name, element.value).value for element in pair)
            elif isinstance(target, cst.Name):
                key_name, loader_name = None, target.value
            else:
                return f"the loop over `{name}.values()` takes its entries in a form ddpify cannot read"
            return [DictPass(inner, name, keys, key_name, loop) for inner in self.loops_over.get(loader_name, ())
                    if loop in self.enclosing_loops(inner)]
        if loop in self.training_loops or loop in self.loops_calling_training:
            return f"a training loop takes `{name}` in a form ddpify cannot read"
        return []

    def sees_value(self, node: cst.CSTNode, name: str, holder: Optional[cst.FunctionDef]) -> bool:
        """Does `name` at node mean the value `holder` holds under that name? Yes in the
        same function, for `self.` attributes in any method, and for a module-level name
        read (not rebound) inside a function."""
        function = self.function_of(node)
        if name.startswith("self.") or function is holder:
            return True
        return holder is None and function is not None and not self.binds_locally(function, name)

    def binds_locally(self, function: Optional[cst.FunctionDef], name: str) -> bool:
        if function is None:
            return False
        if function not in self.local_names:
            self.local_names[function] = names_bound_in(function)
        return name in self.local_names[function]

    def stored_in_self(self, name: str, function: Optional[cst.FunctionDef]) -> list[str]:
        """`self.loader = loader` (or `self.model = model.to(device)`) in a method: the value
        lives on as `self.loader` in every method of the class."""
        if function is None or name.startswith("self."):
            return []
        found: list[str] = []
        for target, values in self.self_assignments.get(function, {}).items():
            if any(dotted_name(unmoved(value)) == name for value in values):
                found.append(target)
        return found

    def is_loader_call(self, node: cst.CSTNode) -> bool:
        return any(loader.call is node for loader in self.loaders)

    def entry_keys_taken(self, loop: cst.For, name: str) -> Optional[list[str]]:
        """When the loop goes over an entry of `name` (`for x, y in loaders["train"]`,
        `loaders[phase]` under `for phase in ("train", "val")`): every key that the module's
        loops take from `name` that way; None when the loop takes `name` itself, or a key that
        is no literal."""
        if not _entry_of(_unwrapped(loop.iter, name), name):
            return None
        keys: list[str] = []
        for each in self.loops_over.get(name, ()):
            iterated = _unwrapped(each.iter, name)
            index = _entry_of(iterated, name)
            if index is None:
                continue
            literal = string_value(index)
            if literal is not None:
                keys.append(literal)
                continue
            key_loop = next((outer for outer in self.enclosing_loops(each) if isinstance(index, cst.Name)
                             and isinstance(outer.target, cst.Name) and outer.target.value == index.value), None)
            domain = _literal_strings(key_loop.iter) if key_loop is not None else None
            if domain is None:
                return None
            keys.extend(domain)
        return list(dict.fromkeys(keys))

    def names_iterated_by(self, loop: cst.For) -> list[str]:
        """The names whose items the loop goes over (`for x in loader`, through `tqdm(loader)`
        or `next(it)` on `it = iter(loader)`)."""
        return [name for name, loops in self.loops_over.items() if loop in loops]

    def calls_of(self, function: Optional[cst.FunctionDef]) -> list[cst.Call]:
        """The calls of a function of this file, by its name or, for a method, `self.name`
        and `instance.name` on a name assigned an instance of its class; for `__call__` (and
        an nn.Module's `forward`), the calls of such an instance itself
        (`early_stopping(val_loss, model)`, `learner(x, y)`); and `Scaler().fit(loader)`, the
        method called on an instance made in place."""
        if function is None:
            return []
        calls = [call for callee in (function.name.value, "self." + function.name.value)
                 if self.functions.get(callee) is function
                 for call in self.calls_by_callee.get(callee, ())]
        owner = self.class_of(function)
        if owner is not None:
            calls.extend(call for call in self.chained_calls if self.method_called(call) is function)
            if self.functions.get("self." + function.name.value) is not function:
                # An override (`Exp_Main._get_data` over `Exp_Basic._get_data`): the calls
                # that the caller's own class resolves to it.
                calls.extend(call for call in self.calls_by_callee.get("self." + function.name.value, ())
                             if self.method_called(call) is function)
            for instance in self._instances_of(owner.name.value):
                calls.extend(self.calls_by_callee.get(f"{instance}.{function.name.value}", ()))
            if function.name.value == "__call__" or (
                    function.name.value == "forward" and owner.name.value in self.module_classes):
                calls.extend(call for instance in self._instances_of(owner.name.value, on_self=True)
                             for call in self.calls_by_callee.get(instance, ()))
        return calls

    def method_called(self, call: cst.Call) -> Optional[cst.FunctionDef]:
        """The method of a class of this file that `self.validate()` (in one of the class's
        methods) or `trainer.validate()` (on a name only ever assigned `Trainer(...)`) calls;
        None when the call is no such method, or when it is inherited from elsewhere. Also
        `Trainer(model, loader).fit(epochs)`: the method of a class of this file called on
        an instance made in place."""
        if not isinstance(call.func, cst.Attribute):
            return None
        made = call.func.value
        if isinstance(made, cst.Call) and isinstance(made.func, cst.Name) and made.func.value in self.classes:
            return self._method_named(self.classes[made.func.value], call.func.attr.value)
        if not isinstance(call.func.value, cst.Name):
            return None
        owner, method = call.func.value.value, call.func.attr.value
        if owner == "self":
            function = self.function_of(call)
            owning = self.class_of(function) if function is not None else None
            return self._method_named(owning, method)
        values = [unmoved(value) for value in self.assigned_values.get(owner, [])]
        classes = {value.func.value for value in values
                   if isinstance(value, cst.Call) and isinstance(value.func, cst.Name)}
        if not values or len(classes) != 1 or len(values) != sum(
                isinstance(value, cst.Call) and isinstance(value.func, cst.Name) for value in values):
            return None
        return self._method_named(self.classes.get(classes.pop()), method)

    def _instance_call(self, name: str) -> Optional[cst.FunctionDef]:
        """The `__call__` of the one class of this file whose instances `name` is only ever
        assigned."""
        values = [unmoved(value) for value in self.assigned_values.get(name, [])]
        classes = {value.func.value for value in values
                   if isinstance(value, cst.Call) and isinstance(value.func, cst.Name)}
        if not values or len(classes) != 1 or not all(isinstance(value, cst.Call) for value in values):
            return None
        return self._method_named(self.classes.get(classes.pop()), "__call__")

    @staticmethod
    def _method_named(owner: Optional[cst.ClassDef], method: str) -> Optional[cst.FunctionDef]:
        if owner is None or not isinstance(owner.body, cst.IndentedBlock):
            return None
        return next((statement for statement in owner.body.body
                     if isinstance(statement, cst.FunctionDef) and statement.name.value == method), None)

    def class_of(self, function: Optional[cst.FunctionDef]) -> Optional[cst.ClassDef]:
        """The class a method belongs to; None for a function, or for module level (None)."""
        if function is None:
            return None
        block = self.parents.get(function)
        owner = self.parents.get(block) if block is not None else None
        return owner if isinstance(owner, cst.ClassDef) else None

    def attribute_on_instances(self, name: str, function: Optional[cst.FunctionDef]) -> list[str]:
        """`trainer.model` for `self.model` of a method of class Trainer: the same attribute
        read from outside the class, on each name assigned `Trainer(...)`."""
        owner = self.class_of(function) if function is not None and name.startswith("self.") else None
        if owner is None:
            return []
        attribute = name[len("self."):]
        return [f"{instance}.{attribute}" for instance in self._instances_of(owner.name.value)]

    def _instances_of(self, class_name: str, on_self: bool = False) -> list[str]:
        """Names assigned `ClassName(...)` (`trainer = Trainer(model, loader)`), also moved or
        put in a mode as it is made (`agent = Agent().to(device)`: a module's `.to()` returns
        the module), and with on_self attributes too (`self.stopper = EarlyStopper()`)."""
        return [name for name, values in self.assigned_values.items()
                if (on_self or not name.startswith("self.")) and any(
                    isinstance(made, cst.Call) and isinstance(made.func, cst.Name)
                    and made.func.value == class_name for made in map(unmoved, values))]

    def _returned_to(self, name: str,
                     function: Optional[cst.FunctionDef]) -> Iterator[tuple[str, Optional[cst.FunctionDef]]]:
        """(name, function) pairs that receive `name` when `function` returns it:
        `return train_loader, val_loader` -> `train_loader, val_loader = make_loaders()`."""
        if function is None:
            return
        for position in self._return_positions(name, function):
            yield from self._call_site_targets(function, position)
        for outer, inner in self._nested_return_positions(name, function):
            for holder, caller in self._call_site_targets(function, outer):
                yield from self._unpacked_from(holder, caller, inner)
        yield from self._returned_through_alias(name, function)

    def _nested_return_positions(self, name: str, function: cst.FunctionDef) -> set[tuple[int, int]]:
        """(k, j) when name is the j-th element of a tuple that is itself the k-th element
        of the returned one: `return (train_loader, val_loader), class_weights`."""
        positions: set[tuple[int, int]] = set()
        for statement in self.own_statements(function, cst.Return):
            if not isinstance(statement.value, cst.Tuple):
                continue
            for outer, element in enumerate(statement.value.elements):
                if isinstance(element.value, cst.Tuple):
                    positions.update((outer, inner) for inner, each in enumerate(element.value.elements)
                                     if not isinstance(each, cst.StarredElement) and dotted_name(each.value) == name)
        return positions

    def _unpacked_from(self, holder: str, function: Optional[cst.FunctionDef],
                       position: int) -> Iterator[tuple[str, Optional[cst.FunctionDef]]]:
        """Rule: the name at `position` of each `a, b, c = holder` in the function that
        received the tuple (`loaders, w, enc = load_dataset()`, then `train_loader,
        val_loader, test_loader = loaders`), when the holder is bound once there and the
        unpacking has no starred target."""
        assigns = self.own_statements(function, cst.Assign)
        if sum(holder in assigned_names(assign) for assign in assigns) != 1:
            return
        for assign in assigns:
            target = assign.targets[0].target if len(assign.targets) == 1 else None
            if not isinstance(target, (cst.Tuple, cst.List)) or dotted_name(assign.value) != holder \
                    or position >= len(target.elements) \
                    or any(isinstance(each, cst.StarredElement) for each in target.elements):
                continue
            received = dotted_name(target.elements[position].value)
            if received is not None:
                yield received, function

    def _returned_through_alias(self, name: str,
                                function: cst.FunctionDef) -> Iterator[tuple[str, Optional[cst.FunctionDef]]]:
        """`if types == "train": dl = train_loader` / `else: dl = dev_loader`, then `return dl`:
        `train_loader` reaches the names that receive the calls whose literal argument takes
        its branch (`train_dl = fetch_dataloader("train", params)`). Rule: the `if` tests
        between the function's body and the alias are read when they compare a parameter
        with literal strings and the call gives that parameter a literal string; a call
        whose branch cannot be read that way is not followed."""
        for assign in self.own_statements(function, cst.Assign):
            if len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name) \
                    or not isinstance(assign.value, cst.Name) or assign.value.value != name:
                continue
            alias = assign.targets[0].target.value
            if alias == name or None not in self._return_positions(alias, function):
                continue
            tests = self._tests_on_the_way(assign, function)
            for call in self.calls_by_callee.get(function.name.value, ()):
                parent = self.parents.get(call)
                if not isinstance(parent, cst.Assign) or len(parent.targets) != 1:
                    continue
                holder = dotted_name(parent.targets[0].target)
                if holder and all(_branch_taken(test, holds, function, call) for test, holds in tests):
                    yield holder, self.function_of(call)

    def _tests_on_the_way(self, node: cst.CSTNode, function: cst.FunctionDef) -> list[tuple[cst.If, bool]]:
        """The `if` statements around `node` up to the function, each with whether `node`
        sits in its body (True) or its else/elif (False)."""
        tests: list[tuple[cst.If, bool]] = []
        child, parent = node, self.parents.get(node)
        while parent is not None and parent is not function:
            if isinstance(parent, cst.If):
                tests.append((parent, child is parent.body))
            child, parent = parent, self.parents.get(parent)
        return tests

    def returned_to_sites(self, name: str, function: Optional[cst.FunctionDef]) -> list[tuple[str, cst.Call]]:
        """(name, call) for each call of `function` whose result (or the element of it that
        `function` returns `name` in) a name receives: `net, last = fit(model)`."""
        if function is None:
            return []
        return [site for position in self._return_positions(name, function)
                for site in self.results_assigned(function, position)]

    def results_assigned(self, function: cst.FunctionDef, position: Optional[int] = None) -> list[tuple[str, cst.Call]]:
        """(name, call) for each call of `function` whose result (or its element at
        `position`) a name receives."""
        found: list[tuple[str, cst.Call]] = []
        for call in self.calls_by_callee.get(function.name.value, ()):
            assign = self.parents.get(call)
            if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
                continue
            target: Optional[cst.BaseExpression] = assign.targets[0].target
            if position is not None:
                elements = target.elements if isinstance(target, (cst.Tuple, cst.List)) else []
                target = elements[position].value if position < len(elements) else None
            holder = dotted_name(target) if target is not None else None
            if holder:
                found.append((holder, call))
        return found

    def _call_site_targets(self, function: cst.FunctionDef,
                           position: Optional[int]) -> Iterator[tuple[str, Optional[cst.FunctionDef]]]:
        """The names that receive a function's return value (or its k-th element), by its
        name or, for a method, `self.name(...)` (`train_data, train_loader =
        self._get_data(flag="train")`, which returns what a data factory returned to it)."""
        for call in self.calls_of(function):
            assign = self.parents.get(call)
            if not isinstance(assign, cst.Assign) or len(assign.targets) != 1 or self.in_a_helpers_demo(call):
                continue
            target: Optional[cst.BaseExpression] = assign.targets[0].target
            if position is not None and isinstance(target, (cst.Tuple, cst.List)):
                elements = target.elements
                target = elements[position].value if position < len(elements) else None
            elif position is not None:
                continue
            holder = dotted_name(target) if target is not None else None
            if holder:
                yield holder, self.function_of(call)

    def in_a_helpers_demo(self, call: cst.Call) -> bool:
        """Rule: in a module that other modules of the project import from (data.py's
        `get_loader`, used by train.py), the `if __name__ == "__main__":` block that trains
        nothing is a demo run on its own with `python data.py` (`loader, dataset =
        get_loader(...)`, then a pass printing batch shapes), never under torchrun with the
        training: what its calls return is not followed there, so its pass neither makes the
        training loader an evaluation one nor reads as a statistics pass over it."""
        guard = self.main_guard
        if guard is None or not self.used_elsewhere or self.ancestor_in(call, guard) is None:
            return False
        if guard not in _DEMO_GUARDS:
            _DEMO_GUARDS[guard] = not self._runs_a_step(guard)
        return bool(_DEMO_GUARDS[guard])

    def _runs_a_step(self, guard: cst.If) -> bool:
        """A `.backward()` or `.step()` in the block, or in a function of this file it calls."""
        called = [self.functions[name] for name in {dotted_name(call.func) for call in calls_within(guard)}
                  if name in self.functions]
        return any(isinstance(call.func, cst.Attribute) and call.func.attr.value in ("backward", "step")
                   for node in [guard, *called] for call in calls_within(node))

    def _return_positions(self, name: str, function: cst.FunctionDef,
                          seen: frozenset[cst.FunctionDef] = frozenset()) -> set[Optional[int]]:
        """None when `return name`, k when name is the k-th element of a returned tuple.
        `return fit(name, loader)`, where `fit` is a function of this file that returns the
        parameter it is handed `name` for (`return model`), returns `name` too."""
        positions: set[Optional[int]] = set()
        for statement in self.own_statements(function, cst.Return):
            value = statement.value
            if value is not None and (name == returned_name(function) and self.is_loader_call(value)
                                      or dotted_name(value) == name
                                      or self._hands_back(value, name, seen | {function})):
                positions.add(None)
            elif isinstance(value, cst.Tuple):
                for index, element in enumerate(value.elements):
                    if dotted_name(element.value) == name:
                        positions.add(index)
        return positions

    def _hands_back(self, value: cst.BaseExpression, name: str, seen: frozenset[cst.FunctionDef],
                    argument: Optional[cst.BaseExpression] = None) -> bool:
        if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Name)):
            return False
        callee = self.functions.get(value.func.value)
        if callee is None or callee in seen or self.class_of(callee) is not None:
            return False
        for parameter in positional_parameters(callee):
            handed = handed_for(value, callee, parameter)
            if handed is not None and (dotted_name(handed) == name or handed is argument) \
                    and None in self._return_positions(parameter, callee, seen):
                return True
        return False

    def hands_back(self, call: cst.Call, argument: cst.BaseExpression) -> bool:
        """`fit(make_model(), loader)`, `fit` a function of this file that returns the
        parameter this argument goes to: the call's value is what the argument made."""
        return self._hands_back(call, "", frozenset(), argument)

    def training_passes_in_one_expression(self, name: str) -> list[cst.CSTNode]:
        """Rule: a comprehension or map() over `name` whose items call a function that trains
        (`[train_step(model, opt, x, y) for x, y in loader]`, `sum(step(b) for b in loader)`,
        `list(map(fit_batch, loader))`) is a training pass over the loader, as a `for` loop
        holding that call is: its epoch is set at the top of the loop around it. One that calls
        nothing that trains (a statistics or prediction pass) is not."""
        passes = self.comprehension_passes.get(name, ())
        if not passes:
            return []
        stepping = {call for function in self.training_functions for call in self.calls_of(function)}
        return [node for node in passes if self._pass_calls(node, stepping)]

    def expression_pass_trains(self, node: cst.CSTNode) -> bool:
        """The comprehension (or map() call) `node` calls a function that trains."""
        stepping = {call for function in self.training_functions for call in self.calls_of(function)}
        return self._pass_calls(node, stepping)

    def _pass_calls(self, node: cst.CSTNode, stepping: set[cst.Call]) -> bool:
        if any(call in stepping for call in calls_within(node)):
            return True
        # `map(fit_batch, loader)`: the function handed is called once per batch.
        handed = dotted_name(node.args[0].value) if isinstance(node, cst.Call) and node.args else None
        return handed is not None and self.functions.get(handed) in self.training_functions

    def _iterates(self, name: str, function: cst.FunctionDef) -> bool:
        return any(self.function_of(loop) is function for loop in self.loops_over.get(name, ())) or any(
            self.function_of(node) is function and self.expression_pass_trains(node)
            for node in self.comprehension_passes.get(name, ()))

    def held_name(self, value: cst.BaseExpression) -> Optional[str]:
        """The name a value passed on goes by: its dotted name, or the stand-in of a loader
        built right there (`fit(model, DataLoader(...))`)."""
        return dotted_name(value) or self.inline_loader_names.get(value)

    def _callee(self, callee_name: str, call: cst.Call) -> tuple[Optional[cst.FunctionDef], bool]:
        """The function of this file a call runs, and whether it is a method called on an
        object (`self` not among the arguments): `self.fit(...)`, `Trainer(...)` (its
        __init__), `trainer.fit(...)` on a name only ever assigned `Trainer(...)`, and
        `stopper(loss, model)` (its class's __call__) on a name or `self.` attribute only
        ever assigned `EarlyStopper(...)`."""
        if callee_name not in self.callees:
            callee = self.functions.get(callee_name)
            instance_call = self._instance_call(callee_name) if callee is None else None
            if instance_call is not None:
                self.callees[callee_name] = instance_call, True
            elif callee is not None:
                self.callees[callee_name] = callee, callee_name.startswith("self.")
            elif callee_name in self.class_inits:
                self.callees[callee_name] = self.class_inits[callee_name], True
            elif "." in callee_name and not callee_name.startswith("self."):
                self.callees[callee_name] = self.method_called(call), True
            else:
                self.callees[callee_name] = None, False
        return self.callees[callee_name]

    def parameters_given(self, name: str, function: Optional[cst.FunctionDef], call: cst.Call) -> list[str]:
        """The parameters of the function `call` runs that receive `name`."""
        return [parameter for _, parameter, passing in self._calls_passing(name, function) if passing is call]

    @overload
    def _calls_passing(self, name: str, function: Optional[cst.FunctionDef]
                       ) -> Iterator[tuple[cst.FunctionDef, str, cst.Call]]: ...

    @overload
    def _calls_passing(self, name: str, function: Optional[cst.FunctionDef], entries: Literal[True]
                       ) -> Iterator[tuple[cst.FunctionDef, str, cst.Call, str]]: ...

    def _calls_passing(self, name: str, function: Optional[cst.FunctionDef],
                       entries: bool = False) -> Iterator[tuple]:
        """(callee, its parameter, call) for each call in `function` that passes `name`;
        with `entries`, (callee, parameter, call, key) for each that passes `name["key"]`.
        A method called on an instance made in place (`Scaler().fit(loader)`) too."""
        chained = [([call], (self.method_called(call), True)) for call in self.chained_calls]
        named = [(calls, self._callee(callee_name, calls[0])) for callee_name, calls in self.calls_by_callee.items()]
        for calls, (callee, on_object) in [*named, *chained]:
            if callee is None:
                continue
            parameters = [p.name.value for p in callee.params.params]
            if parameters[:1] == ["self"] and on_object:
                parameters = parameters[1:]
            for call in calls:
                caller = self.function_of(call)
                # (A module-level name is read as it is by a function that binds no name of its
                # own so called: `main()` handing the module's `train_loader` to `train(...)`.)
                if not (name.startswith("self.") or caller is function or function is None and (
                        "." not in name and not self.binds_locally(caller, name))):
                    continue
                for index, arg in enumerate(call.args):
                    key = literal_entry(arg.value, name) if entries else None
                    if arg.star or (key is None if entries else self.held_name(arg.value) != name):
                        continue
                    if arg.keyword is not None:
                        parameter = arg.keyword.value
                    elif index < len(parameters):
                        parameter = parameters[index]
                    else:
                        continue
                    yield (callee, parameter, call, key) if entries else (callee, parameter, call)


def note_generator_passes_that_train(facts: ValueFlow, next_calls: list[cst.Call]) -> None:
    """The pass loop of a generator over a loader (collector.note_generators_over_loaders)
    whose batches a training loop draws with next() is part of that training: its loader is
    trained on, not evaluated. The training loop may be a `while` (`while step < max_steps:
    x, y = next(batches)`), which counts steps rather than going over anything."""
    for call, (loop, _) in facts.generator_passes.items():
        assign = facts.parents.get(call)
        targets = [dotted_name(target.target) for target in assign.targets] if isinstance(assign, cst.Assign) else []
        if any(taking in facts.training_loops or taking in facts.loops_calling_training
               for target in targets if target is not None for taking in facts.loops_over.get(target, ())) or any(
                _drawn_in_a_training_while(facts, draw) for draw in next_calls
                if draw.args and dotted_name(draw.args[0].value) in targets):
            facts.training_generator_passes.add(loop)
            if isinstance(loop, cst.For):
                facts.loops_calling_training.add(loop)


def _drawn_in_a_training_while(facts: ValueFlow, draw: cst.Call) -> bool:
    """Rule: `next(batches)` whose innermost loop is a `while` of its function (no `for` in
    between) whose body steps an optimizer or calls backward() (facts.training_calls)."""
    child: cst.CSTNode = draw
    parent = facts.parents.get(draw)
    while parent is not None and not isinstance(parent, (cst.FunctionDef, cst.Lambda)):
        if isinstance(parent, cst.For) and child is parent.body:
            return False
        if isinstance(parent, cst.While) and child is parent.body:
            body = set(calls_within(parent.body))
            return any(call in body for call in facts.training_calls)
        child, parent = parent, facts.parents.get(parent)
    return False


def note_loops_taking_batches_with_next(facts: ValueFlow, next_calls: list[cst.Call],
        iteration_wrappers: dict[tuple[Optional[cst.FunctionDef], str], list[str]]) -> None:
    """`it = iter(loader)` ... `for step in range(n): x, y = next(it)`: the step loop goes
    over the loader, as `for x, y in loader` would.

    Rule: `next(iter(val_loader))`, an iterator made in place, draws the loader's first batch
    each time (a sample to show or save), not the batches of a pass. For a loader that a for
    loop of its own goes over, those passes say what it is for (an evaluation loop: sharded
    in turn and its figures gathered), and the loop around the peek (the epoch loop, which
    trains on another loader) is no pass over it: counting it would shard the evaluation
    loader as a training one and leave its figures one rank's."""
    passed = {name for name, loops in facts.loops_over.items() if loops}
    for call in next_calls:
        loops = facts.enclosing_loops(call)
        function = facts.function_of(call)
        if not loops and function is not None and _restarts_iterator(facts, function):
            # `def get_batch(it): try: return next(it) ... except StopIteration: it =
            # iter(loader)`, called in the step loop: the loop takes its batches there.
            loops = [loop for caller in facts.calls_of(function) for loop in facts.enclosing_loops(caller)[:1]]
            loops = loops[:1] if len(set(loops)) == 1 else []
        if not loops:
            continue
        # `next(it)`, or `it.__next__()`.
        source = call.args[0].value if call.args else cast(cst.Attribute, call.func).value
        if _peeks_a_loader_with_passes(source, passed):
            continue
        for name in names_within(source):
            for taken in [name, *iteration_wrappers.get((function, name), ())]:
                if loops[0] not in facts.loops_over.get(taken, ()):
                    facts.loops_over.setdefault(taken, []).append(loops[0])


def _peeks_a_loader_with_passes(source: cst.BaseExpression, passed: set[str]) -> bool:
    """`iter(loader)` or `enumerate(loader)` made where `next()` reads it, of a name that a
    for loop goes over."""
    return isinstance(source, cst.Call) and dotted_name(source.func) in ("iter", "enumerate") \
        and len(source.args) == 1 and dotted_name(source.args[0].value) in passed


def note_loaders_returned_in_a_tuple(facts: ValueFlow) -> None:
    """`def build_data(cfg): ... return DataLoader(train, ...), DataLoader(val, ...)` and
    `train_loader, val_loader = build_data(cfg)`: the loaders have no name in the function,
    only where its caller unpacks them. The function shards its returned tuple by look, as
    for a function another module calls (loader_dicts.py, _shard_returned_sequence); here the
    names that receive the loaders are followed as that module's caller follows them
    (ExternalLoader: set_epoch where a training pass starts, evaluation shares). Only for a
    top-level function with one return, of a tuple or list, called only to unpack it whole
    into as many plain names."""
    loader_calls = set(facts.loader_calls)
    for function in facts.functions.values():
        if facts.function_of(function) is not None or facts.class_of(function) is not None:
            continue
        returns = facts.own_statements(function, cst.Return)
        value = returns[0].value if len(returns) == 1 else None
        if not isinstance(value, (cst.Tuple, cst.List)) or not any(
                element.value in loader_calls for element in value.elements):
            continue
        calls = facts.calls_of(function)
        targets = [_unpacked_into(facts, call, len(value.elements)) for call in calls]
        if not calls or any(names is None for names in targets):
            continue
        facts.tuple_loader_factories.add(function)
        for call, names in zip(calls, targets):
            for element, name in zip(value.elements, names or ()):
                if element.value in loader_calls:
                    facts.external_loaders.append(ExternalLoader(
                        name, facts.function_of(call), facts.statement_of(call), call, function.name.value))


def _unpacked_into(facts: ValueFlow, call: cst.Call, size: int) -> Optional[list[str]]:
    """`a, b = f(...)`: the names, when there are `size` plain ones."""
    assign = facts.parents.get(call)
    if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
        return None
    target = assign.targets[0].target
    if not isinstance(target, (cst.Tuple, cst.List)) or len(target.elements) != size:
        return None
    names = [element.value.value for element in target.elements
             if isinstance(element, cst.Element) and isinstance(element.value, cst.Name)]
    return names if len(names) == size else None


def _restarts_iterator(facts: ValueFlow, function: cst.FunctionDef) -> bool:
    """The function starts a new iterator with `iter(...)` inside an `except StopIteration:`."""
    for handler in find_all(function.body, cst.ExceptHandler, into_functions=False):
        if handler.type is not None and dotted_name(handler.type) == "StopIteration" and any(
                dotted_name(call.func) == "iter" for call in calls_within(handler.body)):
            return True
    return False


def note_helper_output(facts: ValueFlow, calls: Mapping[cst.Call, tuple[str, Optional[Statement]]]) -> None:
    """Statement calls of helpers that print or write are output like `print`, unless the
    bare name (after `from utils import *`) is one this file defines itself."""
    for call, (qualified, statement) in calls.items():
        if "." not in qualified and (qualified in facts.functions or qualified in facts.class_inits
                                     or qualified in facts.assigned_values):
            del facts.helper_effects[call]
        elif facts.helper_effects[call] in (effects.SPEAKS, effects.WRITES) and statement is not None:
            facts.output_statements.append(statement)


def keyword_names(facts: ValueFlow, loader: Loader) -> set[str]:
    """The loader's keywords, with the literal keys of a `**kwargs` dict and its updates."""
    keys = set(loader.keywords)
    if loader.kwargs_name is None:
        return keys
    sources = [loader.kwargs_name]
    for call in facts.calls_by_callee.get(f"{loader.kwargs_name}.update", ()):
        for arg in call.args:
            source = dotted_name(arg.value)
            if source is not None:  # (a None source would name no assigned value)
                sources.append(source)
            keys.update(dict_keys(arg.value))
    for source in sources:
        for value in facts.assigned_values.get(source, ()):
            keys.update(dict_keys(value))
    return keys


def known_dict_keys(facts: ValueFlow, name: str) -> Optional[set[str]]:
    """Every key a `**name` dict can hold, when each value it is given is a dict literal
    (or a choice between two) and nothing updates it; None when that is not known."""
    if facts.calls_by_callee.get(f"{name}.update"):
        return None
    values = facts.assigned_values.get(name, [])
    keys: set[str] = set()
    for value in values:
        known = literal_dict_keys(value)
        if known is None:
            return None
        keys |= known
    return keys if values else None


def literal_dict_keys(value: cst.BaseExpression) -> Optional[set[str]]:
    """Every key a dict written out in place can hold: a literal with string keys, a
    `dict(...)` of keywords, or a choice between two of them (`**({"num_workers": 1,
    "pin_memory": True} if cuda else {})` in a DataLoader call); None otherwise."""
    keys: set[str] = set()
    for option in (value.body, value.orelse) if isinstance(value, cst.IfExp) else (value,):
        if is_dict_call(option):
            keys |= dict_keys(option)
            continue
        if not isinstance(option, cst.Dict) or any(
                not isinstance(element, cst.DictElement) or string_value(element.key) is None
                for element in option.elements):
            return None
        keys |= dict_keys(option)
    return keys


def is_dict_call(value: cst.BaseExpression) -> bool:
    """`dict(batch_size=8, num_workers=2)`: keyword arguments only, so every key is known."""
    return isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value == "dict" \
        and all(arg.keyword is not None and not arg.star for arg in value.args)


def dict_keys(value: cst.BaseExpression) -> set[str]:
    if isinstance(value, cst.IfExp):
        return dict_keys(value.body) | dict_keys(value.orelse)
    if is_dict_call(value):
        return {arg.keyword.value for arg in cast(cst.Call, value).args if arg.keyword is not None}
    if not isinstance(value, cst.Dict):
        return set()
    keys = (string_value(element.key) for element in value.elements
            if isinstance(element, cst.DictElement))
    return {key for key in keys if key is not None}




def _loader_entries(value: cst.BaseExpression, loader_calls: set[cst.Call]
                    ) -> tuple[dict[str, cst.Call], Optional[str], dict[str, str]]:
    """The DataLoader calls of a dict by key, a comprehension's key variable, and the names
    its other entries hold (`{"train": train_loader}`), by key."""
    if isinstance(value, cst.DictComp):
        keys = _literal_strings(value.for_in.iter)
        target = value.for_in.target
        if (keys is None or value.for_in.inner_for_in is not None or value.for_in.ifs
                or not isinstance(target, cst.Name) or not isinstance(value.key, cst.Name)
                or value.key.value != target.value or value.value not in loader_calls):
            return {}, None, {}
        return {key: cast(cst.Call, value.value) for key in keys}, target.value, {}
    pairs: list[tuple[Optional[str], cst.BaseExpression]] = []
    if isinstance(value, cst.Dict):
        for element in value.elements:
            if not isinstance(element, cst.DictElement):
                return {}, None, {}
            pairs.append((string_value(element.key), element.value))
    elif isinstance(value, cst.Call) and dotted_name(value.func) == "dict" and value.args:
        for arg in value.args:
            if arg.keyword is None or arg.star:
                return {}, None, {}
            pairs.append((arg.keyword.value, arg.value))
    if any(key is None for key, _ in pairs):
        return {}, None, {}
    calls = {cast(str, key): cast(cst.Call, entry) for key, entry in pairs if entry in loader_calls}
    # Every key in the dict's order; "" where the entry is no name.
    names = {cast(str, key): entry.value if isinstance(entry, cst.Name) else "" for key, entry in pairs}
    return calls, None, names


def _literal_strings(node: cst.BaseExpression) -> Optional[list[str]]:
    """`["train", "val"]` or `("train", "val")`: the strings; None for anything else."""
    if not isinstance(node, (cst.List, cst.Tuple)):
        return None
    values = [string_value(element.value) for element in node.elements]
    return None if any(value is None for value in values) else cast(list[str], values)


def _unwrapped(iterated: cst.BaseExpression, name: str) -> cst.BaseExpression:
    """`tqdm(loaders[phase])`, `enumerate(loader)`: what the wrappers go over."""
    while (isinstance(iterated, cst.Call) and iterated.args and not iterated.args[0].star
           and not (isinstance(iterated.func, cst.Attribute) and dotted_name(iterated.func.value) == name)):
        iterated = iterated.args[0].value
    return iterated


def _entry_of(value: cst.BaseExpression, name: str) -> Optional[cst.BaseExpression]:
    """`name[key]`: the key; None for anything else."""
    if not (isinstance(value, cst.Subscript) and dotted_name(value.value) == name and len(value.slice) == 1):
        return None
    index = value.slice[0].slice
    return index.value if isinstance(index, cst.Index) else None


def literal_entry(value: cst.BaseExpression, name: str) -> Optional[str]:
    """`name["train"]`: the literal key; None for anything else."""
    key = _entry_of(value, name)
    return string_value(key) if key is not None else None


def _branch_taken(statement: cst.If, holds: bool, function: cst.FunctionDef, call: cst.Call) -> bool:
    """Whether the call surely takes this side of the test: `types == "train"`, `split in
    ("val", "test")`, `!=`, `not in`, of a parameter the call gives a literal string."""
    test = statement.test
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1 or not isinstance(test.left, cst.Name):
        return False
    parameter = test.left.value
    given = handed_for(call, function, parameter)
    text = string_value(given) if given is not None else None
    comparison = test.comparisons[0]
    single = string_value(comparison.comparator)
    values = _literal_strings(comparison.comparator) or ([single] if single is not None else None)
    if text is None or values is None:
        return False
    inside = text in values
    if isinstance(comparison.operator, (cst.Equal, cst.In)):
        return inside == holds
    if isinstance(comparison.operator, (cst.NotEqual, cst.NotIn)):
        return (not inside) == holds
    return False
