"""One read-only pass over the module that finds what the transforms need.

The transforms never re-derive these facts: they plan edits keyed by the very nodes this
pass recorded, and one transformer applies them (see transforms/apply.py).
"""
import builtins
from dataclasses import dataclass, field
from typing import (
    AbstractSet, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Set, Tuple, Union, cast,
    overload,
)

import libcst as cst
from libcst.metadata import (
    CodeRange,
    MetadataWrapper,
    PositionProvider,
)

from ddpify import effects, names
from ddpify.project import Project

# Statements as libcst builds them: a line of small statements, or an if/for/def/...
Statement = Union[cst.SimpleStatementLine, cst.BaseCompoundStatement]
# The block a statement sits in: the module or an indented block (never a one-line suite,
# which holds small statements).
Block = Union[cst.Module, cst.IndentedBlock]
# What the body of any block holds: statements, or the small statements of a one-line
# suite (`def f(): return x`).
BlockItem = Union[cst.BaseStatement, cst.BaseSmallStatement]
# (the function, or None at module level; a name in it): where a value is held.
Holder = Tuple[Optional[cst.FunctionDef], str]


@dataclass
class Loader:
    """A `name = DataLoader(...)` assignment."""

    name: str
    call: cst.Call
    statement: Statement
    function: Optional[cst.FunctionDef]
    dataset: Optional[cst.BaseExpression]
    keywords: Dict[str, cst.Arg]
    # `DataLoader(ds, **loader_kwargs)`: the dict's name; its keys are known only at run time.
    kwargs_name: Optional[str] = None
    # `return DataLoader(...)`: the loader has no name here, only at the call sites.
    returned: bool = False

    @property
    def shuffles(self) -> bool:
        shuffle = self.keywords.get("shuffle")
        return shuffle is not None and not _is_false(shuffle.value)


@dataclass
class Model:
    """A model whose `.parameters()` an optimizer trains."""

    name: str
    optimizer_statement: Statement
    function: Optional[cst.FunctionDef]


@dataclass
class DeviceAssignment:
    name: str
    statement: Statement
    function: Optional[cst.FunctionDef]
    # The script's own "use the GPU?" test (`use_cuda` in `"cuda" if use_cuda else "cpu"`,
    # `torch.device(args.device).type == "cuda"`); None when it is torch.cuda.is_available().
    gpu_condition: Optional[str] = None
    # `torch.accelerator.current_accelerator()`: any accelerator, not only CUDA.
    any_accelerator: bool = False
    # Only CUDA or the CPU (`torch.device("cuda" if ... else "cpu")`, `"cuda:0"`, `0`): the
    # setup block may take the statement's place. Any other choice (an accelerator, MPS, an
    # if/else over several statements) is kept as written and refined after it.
    cuda_or_cpu: bool = True
    # `"cuda" if ... else "cpu"`: a string that the script may print or compare; the setup
    # keeps it a string for plain `python`.
    is_string: bool = False


@dataclass
class Facts:
    module: cst.Module
    already_distributed: Optional[cst.CSTNode] = None
    trains: bool = False
    device_assignments: List[DeviceAssignment] = field(default_factory=list)
    loaders: List[Loader] = field(default_factory=list)
    # For statements whose iterable mentions a name (a loader, usually), by that name.
    loops_over: Dict[str, List[cst.For]] = field(default_factory=dict)
    models: List[Model] = field(default_factory=list)
    # Statements that touch a name as a whole: `m = ...`, `m.to(...)`, `m.load_state_dict(...)`.
    statements_touching: Dict[str, List[Statement]] = field(default_factory=dict)
    fixed_device_moves: List[cst.Call] = field(default_factory=list)
    # `.to(...)`, `.cpu()`, `.cuda()` on a name or an attribute chain, by that name
    # (`transformer.eval().cpu()` is under "transformer").
    device_moves: Dict[str, List[cst.Call]] = field(default_factory=dict)
    # `device == "cuda"`, `"cuda" in device`: comparisons of a name with a string.
    string_comparisons: List[cst.Comparison] = field(default_factory=list)
    fixed_device_values: List[cst.BaseExpression] = field(default_factory=list)
    set_device_statements: List[Statement] = field(default_factory=list)
    visible_devices_statements: List[Statement] = field(default_factory=list)
    output_statements: List[Statement] = field(default_factory=list)
    save_calls: List[cst.Call] = field(default_factory=list)
    # Calls of the project's own helper functions that only compute, print or write files
    # (ddpify/project.py), or also print beside work every rank must do (MIXED), with that
    # effect; a statement call of one that prints or writes is in output_statements too.
    helper_effects: Dict[cst.Call, str] = field(default_factory=dict)
    # Calls of the project's helpers that take training steps (engine.train_one_epoch).
    training_helper_calls: List[cst.Call] = field(default_factory=list)
    load_calls: List[cst.Call] = field(default_factory=list)
    main_guard: Optional[cst.If] = None
    data_parallel_calls: List[cst.Call] = field(default_factory=list)
    batchnorm_calls: List[cst.Call] = field(default_factory=list)
    # Names bound to what a function of another module of the project returns, by the
    # function's full name (`utils.get_loaders`).
    made_in_other_modules: Dict[str, str] = field(default_factory=dict)
    # Some parameter's requires_grad is set (`p.requires_grad = fine_tune`,
    # `requires_grad_(False)`): a model may reach its wrap with nothing to train.
    freezes_parameters: bool = False
    # Map-style Dataset subclasses defined in the file.
    dataset_classes: Set[str] = field(default_factory=set)
    # Submodules a module class creates in __init__ but no other method uses, by class name.
    unused_submodules: Dict[str, List[cst.Assign]] = field(default_factory=dict)
    # `m = torch.compile(m)` statements, by model name.
    compile_statements: Dict[str, List[Statement]] = field(default_factory=dict)
    # Other mentions of DataParallel, such as isinstance(model, nn.DataParallel).
    data_parallel_references: List[cst.BaseExpression] = field(default_factory=list)
    # `model.module`, by the dotted name of the model.
    module_accesses: Dict[str, List[cst.Attribute]] = field(default_factory=dict)
    # `x.attr` read (not assigned) on a dotted name, by that name.
    attribute_reads: Dict[str, List[cst.Attribute]] = field(default_factory=dict)
    # Data: DataLoader and IterableDataset subclasses defined here (a loader class maps to
    # whether its constructor takes `sampler=`), what each name is assigned, loops whose
    # body trains, statements that download a dataset, loops that slice batches by hand.
    loader_classes: Dict[str, bool] = field(default_factory=dict)
    iterable_dataset_classes: Set[str] = field(default_factory=set)
    assigned_values: Dict[str, List[cst.BaseExpression]] = field(default_factory=dict)
    random_sampler_calls: Set[cst.Call] = field(default_factory=set)
    # Every DataLoader call, also those that are no `name = DataLoader(...)` (a dict of them).
    loader_calls: List[cst.Call] = field(default_factory=list)
    training_loops: Set[cst.For] = field(default_factory=set)
    # `loss.backward()` and `optimizer.step()` calls, wherever they are.
    training_calls: List[cst.Call] = field(default_factory=list)
    # Loops that train through a call (`self._run_batch(x, y)` calls backward).
    loops_calling_training: Set[cst.For] = field(default_factory=set)
    # Functions that train: their body calls backward() or step(), or calls one that does.
    training_functions: Set[cst.FunctionDef] = field(default_factory=set)
    download_statements: List[Statement] = field(default_factory=list)
    sliced_batch_loops: List[cst.For] = field(default_factory=list)
    # Functions and methods by name, and calls of them by bare or `self.` name.
    functions: Dict[str, cst.FunctionDef] = field(default_factory=dict)
    # Classes defined here, by name, with their __init__ (None when they inherit it).
    class_inits: Dict[str, Optional[cst.FunctionDef]] = field(default_factory=dict)
    calls_by_callee: Dict[str, List[cst.Call]] = field(default_factory=dict)
    # Every call by the qualified name of what it calls (`tqdm.tqdm`, `builtins.open`).
    calls_named: Dict[str, List[cst.Call]] = field(default_factory=dict)
    bound_names: Set[str] = field(default_factory=set)
    # `self.x = value` in each method: {method: {"self.x": [value, ...]}}.
    self_assignments: Dict[cst.FunctionDef, Dict[str, List[cst.BaseExpression]]] = field(
        default_factory=dict)
    local_names: Dict[cst.FunctionDef, Set[str]] = field(default_factory=dict, repr=False)
    positions: Mapping[cst.CSTNode, CodeRange] = field(default_factory=dict, repr=False)
    parents: Dict[cst.CSTNode, cst.CSTNode] = field(default_factory=dict, repr=False)

    def free_name(self, name: str) -> str:
        """`name`, or `name_`, `name__`, ...: the first the script does not bind."""
        while name in self.bound_names:
            name += "_"
        return name

    def line_of(self, node: cst.CSTNode) -> int:
        return self.positions[node].start.line

    def column_of(self, node: cst.CSTNode) -> int:
        return self.positions[node].start.column + 1

    def function_of(self, node: cst.CSTNode) -> Optional[cst.FunctionDef]:
        """The innermost function around a node; None at module level."""
        parent: Optional[cst.CSTNode] = self.parents.get(node)
        while parent is not None and not isinstance(parent, cst.FunctionDef):
            parent = self.parents.get(parent)
        return parent

    def statement_of(self, node: cst.CSTNode) -> Statement:
        """The statement that holds a node (the node itself if it is one)."""
        while not isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            node = self.parents[node]
        return node

    @overload
    def ancestor_in(self, node: cst.CSTNode, block: Block) -> Optional[Statement]: ...

    @overload
    def ancestor_in(self, node: cst.CSTNode, block: cst.BaseSuite) -> Optional[BlockItem]: ...

    @overload
    def ancestor_in(self, node: cst.CSTNode, block: cst.CSTNode) -> Optional[cst.CSTNode]: ...

    def ancestor_in(self, node: cst.CSTNode, block: cst.CSTNode) -> Optional[cst.CSTNode]:
        """The statement directly in `block` (a Module or IndentedBlock) that holds node.

        Any other block gives the child of it that holds node (the overloads say which)."""
        current: Optional[cst.CSTNode] = node
        while current is not None:
            parent = self.parents.get(current)
            if parent is block:
                return current
            current = parent
        return None

    def block_of(self, statement: Statement) -> Block:
        # A statement's parent is the module or an indented block: a one-line suite holds
        # small statements only.
        return cast(Block, self.parents[statement])

    def epoch_loops(self, name: str, function: Optional[cst.FunctionDef],
                    depth: int = 0) -> List[Tuple[cst.For, str]]:
        """Loops around each pass over the loader held by `name` in `function`.

        Follows the loader into the functions it is passed to (`train(model, loader)`), so the
        epoch loop in main() is found when the batch loop lives in train(). Yields (loop, the
        name the loader has inside that loop). An attribute (`self.loader`) is followed into
        every method of its class.
        """
        found: List[Tuple[cst.For, str]] = []
        if depth > 3:
            return found
        for loop in self.loops_over.get(name, ()):
            if self.sees_value(loop, name, function):
                outer = self.enclosing_loops(loop)
                if outer:
                    found.append((outer[0], name))
                elif name.startswith("self.") or self.function_of(loop) is not function:
                    # `for x in self.loader` in a method that fit() calls once per epoch.
                    found.extend(self._loops_around_calls_of(self.function_of(loop), name))
        for holder, caller in self._returned_to(name, function):
            found.extend(self.epoch_loops(holder, caller, depth + 1))
        for attribute in self.stored_in_self(name, function):
            found.extend(self.epoch_loops(attribute, function, depth + 1))
        for call in self.training_helper_calls:
            # The loader handed to a helper module's training function, once per epoch.
            outer = self.enclosing_loops(call)
            if outer and self.sees_value(call, name, function) and any(
                    not arg.star and dotted_name(arg.value) == name for arg in call.args):
                found.append((outer[0], name))
        for callee, parameter, call in self._calls_passing(name, function):
            outer = self.enclosing_loops(call)
            if outer and self.epoch_loops(parameter, callee, depth + 1) == [] and self._iterates(
                parameter, callee
            ):
                found.append((outer[0], name))
            else:
                found.extend(self.epoch_loops(parameter, callee, depth + 1))
        return found

    def loader_holders(self) -> Set[Holder]:
        """(function, name) pairs that hold a DataLoader: where it is built, and every
        parameter it is passed to and variable it is returned into."""
        return self._holders([(loader.function, loader.name) for loader in self.loaders])

    def model_holders(self, model: "Model") -> Set[Holder]:
        """Where a model's value goes: returned, passed on, stored on self."""
        return self._holders([(model.function, model.name)])

    def loader_holders_of(self, loader: Loader) -> Set[Holder]:
        return self._holders([(loader.function, loader.name)])

    def holders_from(self, function: Optional[cst.FunctionDef], name: str) -> Set[Holder]:
        """Where the value `name` holds in `function` goes from there."""
        return self._holders([(function, name)])

    def loops_over_values(self, holders: Iterable[Holder]) -> List[cst.For]:
        """The for loops that iterate one of these held values."""
        return [loop for function, name in holders for loop in self.loops_over.get(name, ())
                if self.sees_value(loop, name, function)]

    def loop_trains(self, loop: cst.For) -> bool:
        """The loop's body trains, itself or through a function it calls."""
        return loop in self.training_loops or loop in self.loops_calling_training

    def _holders(self, work: List[Holder]) -> Set[Holder]:
        holders: Set[Holder] = set()
        while work:
            function, name = work.pop()
            if (function, name) in holders:
                continue
            holders.add((function, name))
            work.extend((caller, holder) for holder, caller in self._returned_to(name, function))
            work.extend((callee, parameter)
                        for callee, parameter, _ in self._calls_passing(name, function))
            work.extend((function, attribute) for attribute in self.stored_in_self(name, function))
        return holders

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
            self.local_names[function] = _names_bound_in(function)
        return name in self.local_names[function]

    def stored_in_self(self, name: str, function: Optional[cst.FunctionDef]) -> List[str]:
        """`self.loader = loader` (or `self.model = model.to(device)`) in a method: the value
        lives on as `self.loader` in every method of the class."""
        if function is None or name.startswith("self."):
            return []
        found: List[str] = []
        for target, values in self.self_assignments.get(function, {}).items():
            if any(dotted_name(_unmoved(value)) == name for value in values):
                found.append(target)
        return found

    def is_loader_call(self, node: cst.CSTNode) -> bool:
        return any(loader.call is node for loader in self.loaders)

    def names_iterated_by(self, loop: cst.For) -> List[str]:
        """The names whose items the loop goes over (`for x in loader`, through `tqdm(loader)`
        or `next(it)` on `it = iter(loader)`)."""
        return [name for name, loops in self.loops_over.items() if loop in loops]

    def batch_loops_without_loader(self) -> List[cst.For]:
        """Innermost training loops that iterate no DataLoader: batches built by hand."""
        holders = self.loader_holders()
        outer = {enclosing for loop in self.training_loops for enclosing in self.enclosing_loops(loop)}
        found: List[cst.For] = []
        for loop in self.training_loops - outer:
            function = self.function_of(loop)
            if not any((function, name) in holders or (None, name) in holders and not self.binds_locally(
                    function, name) or (name.startswith("self.") and any(
                    held == name for _, held in holders)) for name in self.names_iterated_by(loop)):
                found.append(loop)
        return sorted(found, key=self.line_of)

    def calls_of(self, function: Optional[cst.FunctionDef]) -> List[cst.Call]:
        """The calls of a function of this file, by its name or, for a method, `self.name`
        and `instance.name` on a name assigned an instance of its class."""
        if function is None:
            return []
        calls = [call for callee in (function.name.value, "self." + function.name.value)
                 if self.functions.get(callee) is function
                 for call in self.calls_by_callee.get(callee, ())]
        owner = self._class_of(function)
        if owner is not None:
            for instance in self._instances_of(owner.name.value):
                calls.extend(self.calls_by_callee.get(f"{instance}.{function.name.value}", ()))
        return calls

    def _class_of(self, function: cst.FunctionDef) -> Optional[cst.ClassDef]:
        block = self.parents.get(function)
        owner = self.parents.get(block) if block is not None else None
        return owner if isinstance(owner, cst.ClassDef) else None

    def _instances_of(self, class_name: str) -> List[str]:
        """Names assigned `ClassName(...)` (`trainer = Trainer(model, loader)`)."""
        return [name for name, values in self.assigned_values.items()
                if not name.startswith("self.") and any(
                    isinstance(value, cst.Call) and isinstance(value.func, cst.Name)
                    and value.func.value == class_name for value in values)]

    def _loops_around_calls_of(self, function: Optional[cst.FunctionDef],
                               name: str) -> List[Tuple[cst.For, str]]:
        found: List[Tuple[cst.For, str]] = []
        for call in self.calls_of(function):
            outer = self.enclosing_loops(call)
            if outer:
                found.append((outer[0], name))
        return found

    def _returned_to(self, name: str,
                     function: Optional[cst.FunctionDef]) -> Iterator[Tuple[str, Optional[cst.FunctionDef]]]:
        """(name, function) pairs that receive `name` when `function` returns it:
        `return train_loader, val_loader` -> `train_loader, val_loader = make_loaders()`."""
        if function is None:
            return
        for position in self._return_positions(name, function):
            yield from self._call_site_targets(function, position)

    def _call_site_targets(self, function: cst.FunctionDef,
                           position: Optional[int]) -> Iterator[Tuple[str, Optional[cst.FunctionDef]]]:
        """The names that receive a function's return value (or its k-th element)."""
        for call in self.calls_by_callee.get(function.name.value, ()):
            assign = self.parents.get(call)
            if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
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

    def _return_positions(self, name: str, function: cst.FunctionDef) -> Set[Optional[int]]:
        """None when `return name`, k when name is the k-th element of a returned tuple."""
        positions: Set[Optional[int]] = set()
        for statement in _walk_returns(function):
            value = statement.value
            if name == returned_name(function) and value is not None and self.is_loader_call(value):
                positions.add(None)
            elif value is not None and dotted_name(value) == name:
                positions.add(None)
            elif isinstance(value, cst.Tuple):
                for index, element in enumerate(value.elements):
                    if dotted_name(element.value) == name:
                        positions.add(index)
        return positions

    def _iterates(self, name: str, function: cst.FunctionDef) -> bool:
        return any(self.function_of(loop) is function for loop in self.loops_over.get(name, ()))

    def _calls_passing(self, name: str,
                       function: Optional[cst.FunctionDef]) -> Iterator[Tuple[cst.FunctionDef, str, cst.Call]]:
        """(callee, its parameter, call) for each call in `function` that passes `name`."""
        for callee_name, calls in self.calls_by_callee.items():
            callee = self.functions.get(callee_name) or self.class_inits.get(callee_name)
            if callee is None:
                continue
            parameters = [p.name.value for p in callee.params.params]
            if parameters[:1] == ["self"] and (
                callee_name.startswith("self.") or callee_name in self.class_inits
            ):
                parameters = parameters[1:]
            for call in calls:
                if not (name.startswith("self.") or self.function_of(call) is function):
                    continue
                for index, arg in enumerate(call.args):
                    if dotted_name(arg.value) != name or arg.star:
                        continue
                    if arg.keyword is not None:
                        parameter = arg.keyword.value
                    elif index < len(parameters):
                        parameter = parameters[index]
                    else:
                        continue
                    yield callee, parameter, call

    def first_training_call_in(self, function: Optional[cst.FunctionDef]) -> Optional[cst.Call]:
        """The first call in `function` (None: the module) that trains: backward(), an
        optimizer's step(), a call of a function that trains; None when it trains nowhere."""
        calls: List[cst.Call] = [*self.training_calls, *self.training_helper_calls]
        for trainer in self.training_functions:
            calls.extend(self.calls_of(trainer))
        here = [call for call in calls if self.function_of(call) is function]
        return min(here, key=self.start_of, default=None)

    def start_of(self, node: cst.CSTNode) -> Tuple[int, int]:
        start = self.positions[node].start
        return start.line, start.column

    def end_of(self, node: cst.CSTNode) -> Tuple[int, int]:
        end = self.positions[node].end
        return end.line, end.column

    def enclosing_loops(self, node: cst.CSTNode) -> List[cst.For]:
        """For loops whose body (not header) holds node, innermost first, up to the function."""
        loops: List[cst.For] = []
        child: cst.CSTNode = node
        parent = self.parents.get(node)
        while parent is not None and not isinstance(parent, cst.FunctionDef):
            if isinstance(parent, cst.For) and child is parent.body:
                loops.append(parent)
            child, parent = parent, self.parents.get(parent)
        return loops


def analyse(wrapper: MetadataWrapper, project: Optional[Project] = None) -> Facts:
    """The facts of one module; `project` tells what the functions of the project's own
    modules that it calls do."""
    collector = _Collector(Facts(module=wrapper.module), project or Project())
    wrapper.visit(collector)
    facts = collector.facts
    # Already computed for the visit: resolve() hands back the cached maps.
    facts.positions = wrapper.resolve(PositionProvider)
    facts.parents = collector.parents
    facts.trains = bool(collector.training_tops & _reached_when_run(facts.module, collector.names_in_top))
    facts.training_calls = collector.training_calls
    collector.note_helper_methods()
    _note_helper_output(facts, collector.helper_calls)
    _mark_loops_calling_training_functions(facts, collector.training_calls)
    _note_loops_taking_batches_with_next(facts, collector)
    return facts


def _note_loops_taking_batches_with_next(facts: Facts, collector: "_Collector") -> None:
    """`it = iter(loader)` ... `for step in range(n): x, y = next(it)`: the step loop goes
    over the loader, as `for x, y in loader` would."""
    for call in collector.next_calls:
        loops = facts.enclosing_loops(call)
        if not loops:
            continue
        function = facts.function_of(call)
        for name in _names_within(call.args[0].value):
            for taken in [name, *collector.iteration_wrappers.get((function, name), ())]:
                if loops[0] not in facts.loops_over.get(taken, ()):
                    facts.loops_over.setdefault(taken, []).append(loops[0])


def _note_helper_output(facts: Facts, calls: Mapping[cst.Call, Tuple[str, Optional[Statement]]]) -> None:
    """Statement calls of helpers that print or write are output like `print`, unless the
    bare name (after `from utils import *`) is one this file defines itself."""
    for call, (qualified, statement) in calls.items():
        if "." not in qualified and (qualified in facts.functions or qualified in facts.class_inits
                                     or qualified in facts.assigned_values):
            del facts.helper_effects[call]
        elif facts.helper_effects[call] in (effects.SPEAKS, effects.WRITES) and statement is not None:
            facts.output_statements.append(statement)


def _mark_loops_calling_training_functions(facts: Facts, training_calls: List[cst.Call]) -> None:
    """A loop that calls a function or method that trains (`self._run_batch(x, y)`, whose
    body calls backward) trains too, and so does the function around it, in turn."""
    training = _functions_of(facts, training_calls)
    # A function that takes one step (`train_step(model, x, y)`: backward, no loop of its
    # own) makes the loop around each of its calls a training loop, as if inlined.
    step_functions = _functions_of(facts, [call for call in training_calls if not facts.enclosing_loops(call)])
    for function in step_functions:
        for call in facts.calls_of(function):
            facts.training_loops.update(facts.enclosing_loops(call)[:1])
    facts.training_functions = training
    pending = list(training)
    while pending:
        function = pending.pop()
        for call in facts.calls_of(function):
            facts.loops_calling_training.update(facts.enclosing_loops(call))
            caller = facts.function_of(call)
            if caller is not None and caller not in training:
                training.add(caller)
                pending.append(caller)


def _functions_of(facts: Facts, calls: Iterable[cst.Call]) -> Set[cst.FunctionDef]:
    """The functions the calls sit in; calls at module level have none."""
    return {function for function in map(facts.function_of, calls) if function is not None}


def statements_in(block: Block) -> Sequence[Statement]:
    """A block's body as libcst builds it: IndentedBlock.body is typed Sequence[BaseStatement],
    whose only kinds are the two of Statement. The same sequence, not a copy."""
    return cast(Sequence[Statement], block.body)


def returned_name(function: cst.FunctionDef) -> str:
    """The name a loader built in a return statement goes by: not a valid identifier, so
    it never meets a name of the script."""
    return f"<return of {function.name.value}>"


def _unmoved(value: cst.BaseExpression) -> cst.BaseExpression:
    """`model.to(device)` / `model.cuda()` -> `model`: the same module, moved."""
    while (
        isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
        and value.func.attr.value in ("to", "cuda", "cpu", "train", "eval", "float", "double",
                                      "half")
    ):
        value = value.func.value
    return value


def dotted_name(node: cst.BaseExpression) -> Optional[str]:
    """`self.model` -> "self.model"; None for anything but names and attribute chains."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = dotted_name(node.value)
        return f"{base}.{node.attr.value}" if base else None
    return None


def string_value(node: cst.BaseExpression) -> Optional[str]:
    if isinstance(node, cst.SimpleString):
        return node.evaluated_value if isinstance(node.evaluated_value, str) else None
    return None


def is_fixed_gpu(node: cst.BaseExpression) -> bool:
    """A literal that names one GPU for every process: "cuda", "cuda:0", or 0."""
    text = string_value(node)
    if text is not None:
        return text == "cuda" or text.startswith("cuda:")
    return isinstance(node, cst.Integer)


def _is_string_choice(value: cst.BaseExpression) -> bool:
    """`"cuda" if cond else "cpu"` (not a fixed `"cuda:0"`, which pins one GPU for all)."""
    if isinstance(value, cst.IfExp):
        return _is_string_choice(value.body) and _is_string_choice(value.orelse)
    text = string_value(value)
    return text in ("cuda", "cpu")


# Calls whose result yields the items of their first argument.
ITERATION_WRAPPERS = names.PROGRESS_BARS | {"builtins.enumerate", "builtins.iter", "builtins.zip"}


def _is_true(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value == "True"


def _is_false(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value in ("False", "None")


def _keywords(call: cst.Call) -> Dict[str, cst.Arg]:
    return {arg.keyword.value: arg for arg in call.args if arg.keyword is not None}


def _positional(call: cst.Call) -> List[cst.BaseExpression]:
    return [arg.value for arg in call.args if arg.keyword is None and not arg.star]


class _Collector(cst.CSTVisitor):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, facts: Facts, project: Project) -> None:
        super().__init__()
        self.facts = facts
        self.project = project
        self.helper_calls: Dict[cst.Call, Tuple[str, Optional[Statement]]] = {}
        self._function_stack: List[cst.FunctionDef] = []
        # Parents are recorded on the way down: cheaper than a ParentNodeProvider pass,
        # and a node's ancestors are always known by the time it is visited.
        self.parents: Dict[cst.CSTNode, cst.CSTNode] = {}
        self._ancestors: List[cst.CSTNode] = []
        # What each imported name stands for: `nn` -> "torch.nn", `DL` ->
        # "torch.utils.data.DataLoader". A table of the file's imports answers what libcst's
        # QualifiedNameProvider would, for a fraction of its cost (its scope analysis was
        # half of ddpify's time); rebinding an imported name to something else is not seen.
        self._aliases: Dict[str, str] = {}
        # The top-level statement being visited, the names each one mentions, and those
        # that hold training code: to tell whether running the file trains anything.
        self._top: Optional[cst.CSTNode] = None
        self.names_in_top: Dict[cst.CSTNode, Set[str]] = {}
        self.training_tops: Set[cst.CSTNode] = set()
        self.training_calls: List[cst.Call] = []
        # (function, name) -> the names of the iterable a progress bar or enumerate() held
        # in that name goes over.
        self.iteration_wrappers: Dict[Tuple[Optional[cst.FunctionDef], str], List[str]] = {}
        self.next_calls: List[cst.Call] = []

    def _note_training(self) -> None:
        # Training calls sit inside a top-level statement: _top is set by then.
        if self._top is not None:
            self.training_tops.add(self._top)

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self._ancestors:
            self.parents[node] = self._ancestors[-1]
            if isinstance(self._ancestors[-1], cst.Module):
                self._top = node
        self._ancestors.append(node)
        return super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode) -> None:
        super().on_leave(original_node)
        self._ancestors.pop()

    # --- helpers ---------------------------------------------------------------------------
    def _qualified(self, node: cst.BaseExpression) -> Set[str]:
        # A call on a call (`model(x).sum`) resolves to misleading names: only trust plain
        # names and attribute chains.
        dotted = dotted_name(node)
        if dotted is None:
            return set()
        head, _, rest = dotted.partition(".")
        if head in self._aliases:
            return {self._aliases[head] + ("." + rest if rest else "")}
        if head in _BUILTINS:
            return {"builtins." + dotted}
        return {dotted}

    def _calls(self, call: cst.Call, wanted: Union[str, AbstractSet[str]]) -> bool:
        qualified = self._qualified(call.func)
        if isinstance(wanted, str):
            return wanted in qualified
        return bool(qualified & wanted)

    def _function(self) -> Optional[cst.FunctionDef]:
        return self._function_stack[-1] if self._function_stack else None

    def _statement(self, node: cst.CSTNode) -> Statement:
        parent = node
        while not isinstance(parent, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            parent = self.parents[parent]
        return parent

    def _touch(self, name: str, node: cst.CSTNode) -> None:
        self.facts.statements_touching.setdefault(name, []).append(self._statement(node))

    # --- imports -------------------------------------------------------------------------------
    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            module = dotted_name(alias.name)
            if module is None:
                continue
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                self._aliases[alias.asname.name.value] = module
            else:
                top = module.split(".")[0]
                self._aliases[top] = top

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if node.relative or node.module is None or isinstance(node.names, cst.ImportStar):
            return
        module = dotted_name(node.module)
        for alias in node.names:
            name = dotted_name(alias.name)
            # libcst types AsName.name for `except`/`with` targets too; in an import it is a Name.
            bound = cast(cst.Name, alias.asname.name).value if alias.asname is not None else name
            if module and name and isinstance(bound, str):
                self._aliases[bound] = f"{module}.{name}"

    # --- scopes ------------------------------------------------------------------------------
    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._function_stack.append(node)
        self.facts.bound_names.add(node.name.value)
        is_method = isinstance(self.parents.get(node), cst.IndentedBlock) and any(
            p.name.value == "self" for p in node.params.params[:1]
        )
        self.facts.functions.setdefault(("self." if is_method else "") + node.name.value, node)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._function_stack.pop()

    def _record_unused_submodules(self, node: cst.ClassDef) -> None:
        created: Dict[str, cst.Assign] = {}
        used: Set[str] = set()
        for method in node.body.body:
            if not isinstance(method, cst.FunctionDef):
                continue
            for attribute, assign in _self_attributes(method):
                if method.name.value == "__init__" and assign is not None:
                    if isinstance(assign.value, cst.Call) and any(
                        q.startswith("torch.nn.") for q in self._qualified(assign.value.func)
                    ):
                        created[attribute] = assign
                elif assign is None:
                    used.add(attribute)
        unused = [assign for attribute, assign in created.items() if attribute not in used]
        has_forward = any(isinstance(m, cst.FunctionDef) and m.name.value == "forward"
                          for m in node.body.body)
        if unused and has_forward:
            self.facts.unused_submodules[node.name.value] = unused

    def visit_If(self, node: cst.If) -> None:
        test = node.test
        if (
            self._function() is None
            and isinstance(test, cst.Comparison)
            and isinstance(test.left, cst.Name)
            and test.left.value == "__name__"
        ):
            self.facts.main_guard = node

    def visit_Name(self, node: cst.Name) -> None:
        self.facts.bound_names.add(node.value)
        if self._top is not None:  # every Name sits in a top-level statement
            self.names_in_top.setdefault(self._top, set()).add(node.value)
        self._note_data_parallel(node)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._note_data_parallel(node)
        receiver = dotted_name(node.value)
        if receiver is None:
            return
        if node.attr.value == "module":
            self.facts.module_accesses.setdefault(receiver, []).append(node)
        elif not isinstance(self.parents.get(node), cst.AssignTarget):
            self.facts.attribute_reads.setdefault(receiver, []).append(node)

    def _note_data_parallel(self, node: cst.BaseExpression) -> None:
        parent = self.parents.get(node)
        if isinstance(parent, cst.Attribute) and parent.value is node:
            return  # only the whole dotted name counts
        if isinstance(parent, (cst.ImportAlias, cst.ImportFrom)) or not (self._qualified(node) & names.DATA_PARALLEL):
            return
        if isinstance(parent, cst.Call) and parent.func is node:
            self.facts.data_parallel_calls.append(parent)
        else:
            self.facts.data_parallel_references.append(node)

    # --- assignments ---------------------------------------------------------------------------
    def visit_Assign(self, node: cst.Assign) -> None:
        if any(isinstance(t.target, cst.Attribute) and t.target.attr.value == "requires_grad"
               for t in node.targets):
            self.facts.freezes_parameters = True
        if len(node.targets) != 1:
            return
        self._note_values_from_other_modules(node)
        target = dotted_name(node.targets[0].target)
        if target is None:
            return
        self._touch(target, node)
        value = node.value
        self.facts.assigned_values.setdefault(target, []).append(value)
        function = self._function()
        if isinstance(value, cst.Call) and self._qualified(value.func) & ITERATION_WRAPPERS:
            wrapped = [name for arg in _positional(value)[:1] for name in _names_within(arg)]
            self.iteration_wrappers[(function, target)] = wrapped
        if function is not None and target.startswith("self.") and target.count(".") == 1:
            self.facts.self_assignments.setdefault(function, {}).setdefault(target, []).append(value)
        if isinstance(value, cst.Call) and self._is_loader_class(value.func):
            self.facts.loaders.append(self._loader(target, value, node))
        elif self._is_device_value(value, target):
            self.facts.device_assignments.append(
                DeviceAssignment(target, self._statement(node), self._function(),
                                 self._gpu_condition(value), self._is_accelerator(value),
                                 self._cuda_or_cpu(value),
                                 isinstance(value, cst.IfExp) and _is_string_choice(value))
            )

    def _note_values_from_other_modules(self, node: cst.Assign) -> None:
        """`train_dl, val_dl = utils.get_loaders(cfg)`: names made by a function of another
        module of the project, which ddpify reads but does not rewrite."""
        if not isinstance(node.value, cst.Call):
            return
        made_by = next((q for q in sorted(self._qualified(node.value.func)) if self.project.defines(q)), None)
        if made_by is not None:
            for name in _names_within(node.targets[0].target):
                self.facts.made_in_other_modules[name] = made_by

    def visit_Return(self, node: cst.Return) -> None:
        value = node.value
        function = self._function()
        if function is not None and isinstance(value, cst.Call) and self._is_loader_class(value.func):
            self.facts.loaders.append(self._loader(returned_name(function), value, node, True))

    def _loader(self, name: str, call: cst.Call, node: cst.CSTNode, returned: bool = False) -> Loader:
        positional = _positional(call)
        keywords = _keywords(call)
        dataset = keywords["dataset"].value if "dataset" in keywords else (
            positional[0] if positional else None
        )
        star = [arg.value for arg in call.args if arg.star == "**"]
        return Loader(name, call, self._statement(node), self._function(), dataset, keywords,
                      dotted_name(star[0]) if len(star) == 1 else None, returned)

    def _is_loader_class(self, func: cst.BaseExpression) -> bool:
        if isinstance(func, cst.Name) and func.value in self.facts.loader_classes:
            return True
        return bool(self._qualified(func) & names.DATALOADER_ALIASES)

    # --- data classes ----------------------------------------------------------------------------
    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._record_unused_submodules(node)
        self.facts.class_inits[node.name.value] = next(
            (statement for statement in node.body.body
             if isinstance(statement, cst.FunctionDef) and statement.name.value == "__init__"),
            None,
        )
        bases = [base.value for base in node.bases if base.keyword is None]
        if any(self._qualified(base) & names.DATASET
               or (isinstance(base, cst.Name) and base.value in self.facts.dataset_classes)
               for base in bases):
            self.facts.dataset_classes.add(node.name.value)
        if any(self._is_loader_class(base) for base in bases):
            self.facts.loader_classes[node.name.value] = _init_takes_sampler(node)
        if any(
            self._qualified(base) & names.ITERABLE_DATASET
            or (isinstance(base, cst.Name) and base.value in self.facts.iterable_dataset_classes)
            for base in bases
        ):
            self.facts.iterable_dataset_classes.add(node.name.value)

    def _gpu_condition(self, value: cst.BaseExpression) -> Optional[str]:
        if isinstance(value, cst.Call) and self._calls(value, names.TORCH_DEVICE):
            arguments = _positional(value)
            if len(value.args) != 1 or len(arguments) != 1:
                return None
            if dotted_name(arguments[0]) is not None:
                # `torch.device(args.device)`: the user picks; `--device cpu` must still work.
                return f'torch.device({self.facts.module.code_for_node(arguments[0])}).type == "cuda"'
            return self._gpu_condition(arguments[0])
        if not isinstance(value, cst.IfExp) or not self._names_gpu(value.body):
            return None
        test = value.test
        if isinstance(test, cst.Call) and self._calls(test, names.CUDA_IS_AVAILABLE):
            return None
        return self.facts.module.code_for_node(test)

    def _names_gpu(self, value: cst.BaseExpression) -> bool:
        if isinstance(value, cst.Call) and self._calls(value, names.TORCH_DEVICE):
            return bool(value.args) and self._names_gpu(value.args[0].value)
        text = string_value(value)
        return text is not None and (text == "cuda" or text.startswith("cuda:"))

    def _cuda_or_cpu(self, value: cst.BaseExpression) -> bool:
        if isinstance(value, cst.IfExp):
            return self._cuda_or_cpu(value.body) and self._cuda_or_cpu(value.orelse)
        if isinstance(value, cst.Call) and self._calls(value, names.TORCH_DEVICE):
            arguments = _positional(value)
            return len(arguments) == 1 and (
                dotted_name(arguments[0]) is not None or self._cuda_or_cpu(arguments[0])
            )
        text = string_value(value)
        if text is not None:
            return text in ("cuda", "cpu") or text.startswith("cuda:")
        return isinstance(value, cst.Integer)

    def _is_accelerator(self, value: cst.BaseExpression) -> bool:
        if isinstance(value, cst.IfExp):
            return self._is_accelerator(value.body) or self._is_accelerator(value.orelse)
        return isinstance(value, cst.Call) and self._calls(value, names.CURRENT_ACCELERATOR)

    def _is_device_value(self, value: cst.BaseExpression, target: str) -> bool:
        if isinstance(value, cst.Call):
            return self._calls(value, names.TORCH_DEVICE) or self._calls(
                value, names.CURRENT_ACCELERATOR
            )
        if isinstance(value, cst.IfExp):
            return self._is_device_value(value.body, target) or self._is_device_value(
                value.orelse, target
            )
        text = string_value(value)
        if text is not None:
            return text in ("cuda", "cpu") or text.startswith("cuda:")
        return isinstance(value, cst.Integer) and "device" in target.lower()

    # --- calls ---------------------------------------------------------------------------------
    def visit_Call(self, node: cst.Call) -> None:
        facts = self.facts
        if self._calls(node, names.INIT_PROCESS_GROUP) or self._calls(
            node, names.DISTRIBUTED_DATA_PARALLEL
        ):
            facts.already_distributed = facts.already_distributed or node
        func = node.func
        if isinstance(func, cst.Name) and func.value == "print" and self._is_statement_call(node):
            facts.output_statements.append(self._statement(node))
        elif self._calls(node, names.TORCH_SAVE):
            facts.save_calls.append(node)
            if self._is_statement_call(node):
                facts.output_statements.append(self._statement(node))
        elif self._calls(node, names.TORCH_LOAD):
            facts.load_calls.append(node)
        elif self._calls(node, names.CUDA_SET_DEVICE) and self._is_statement_call(node):
            facts.set_device_statements.append(self._statement(node))
        elif self._calls(node, names.TORCH_DEVICE) and node.args and is_fixed_gpu(node.args[0].value):
            facts.fixed_device_values.append(node)
        elif self._is_optimizer(node):
            self._record_optimizer(node)
        if isinstance(func, cst.Attribute):
            self._visit_method_call(node, func)
        if self._is_loader_class(func):
            facts.loader_calls.append(node)
        if self._calls(node, "builtins.next") and node.args:
            self.next_calls.append(node)
        if self._calls(node, names.RANDOM_SAMPLER):
            facts.random_sampler_calls.add(node)
        if any(
            arg.keyword is not None and arg.keyword.value == "download" and not _is_false(arg.value)
            for arg in node.args
        ) or self._calls(node, names.FETCH_OR_UNPACK):
            statement = self._statement(node)
            if statement not in facts.download_statements:
                facts.download_statements.append(statement)
        if self._calls(node, names.BATCHNORM):
            facts.batchnorm_calls.append(node)
        if self._calls(node, names.TORCH_COMPILE) and node.args:
            compiled = dotted_name(node.args[0].value)
            if compiled:
                facts.compile_statements.setdefault(compiled, []).append(self._statement(node))
        callee = dotted_name(func)
        if callee is not None:
            self.facts.calls_by_callee.setdefault(callee, []).append(node)
        for qualified in self._qualified(func):
            facts.calls_named.setdefault(qualified, []).append(node)
            self._note_helper(node, qualified)

    def _note_helper(self, node: cst.Call, qualified: str) -> None:
        if self.project.trains(qualified):
            # `engine.train_one_epoch(model, loader, optimizer)`: the steps are in there.
            self.facts.training_helper_calls.append(node)
            self._note_training()
        effect = self.project.effect(qualified)
        if effect is not None:
            self._record_helper(node, qualified, effect)

    def _record_helper(self, node: cst.Call, qualified: str, effect: str) -> None:
        self.facts.helper_effects[node] = effect
        statement = self._statement(node) if self._is_statement_call(node) else None
        self.helper_calls[node] = (qualified, statement)

    def note_helper_methods(self) -> None:
        """`progress.display(i)` where every `progress = ProgressMeter(...)` makes an object
        of a class of the project's modules: the effect of ProgressMeter.display."""
        for callee, calls in self.facts.calls_by_callee.items():
            owner, _, method = callee.rpartition(".")
            values = self.facts.assigned_values.get(owner, [])
            if not owner or not values or not all(isinstance(value, cst.Call) for value in values):
                continue
            found = {self.project.effect(f"{qualified}.{method}")
                     for value in values for qualified in self._qualified(cast(cst.Call, value).func)}
            if len(found) != 1 or None in found:
                continue
            effect = cast(str, found.pop())
            for call in calls:
                if call not in self.facts.helper_effects:
                    self._record_helper(call, callee, effect)

    def _is_statement_call(self, node: cst.Call) -> bool:
        parent = self.parents.get(node)
        return isinstance(parent, cst.Expr)

    def _is_optimizer(self, node: cst.Call) -> bool:
        qualified = self._qualified(node.func)
        return any(
            q.startswith(names.OPTIMIZER_PREFIX) and not q.startswith(names.LR_SCHEDULER_PREFIX)
            and q[len(names.OPTIMIZER_PREFIX):][:1].isupper()
            for q in qualified
        )

    def _record_optimizer(self, node: cst.Call) -> None:
        self._note_training()
        positional = _positional(node)
        params = _keywords(node).get("params")
        first = params.value if params is not None else (positional[0] if positional else None)
        # `Adam(model.parameters())` names the model; parameter groups and filters are
        # searched for the same `X.parameters()` call inside them, also through the names
        # they were built in (`params = [p for n, p in model.named_parameters() if ...]`).
        for call in calls_within(first) + self._calls_in_values_of(first):
            if isinstance(call.func, cst.Attribute) and call.func.attr.value in ("parameters", "named_parameters"):
                model = dotted_name(call.func.value)
                if model and all(m.name != model for m in self.facts.models):
                    self.facts.models.append(
                        Model(model, self._statement(node), self._function())
                    )

    def _calls_in_values_of(self, node: Optional[cst.BaseExpression], depth: int = 0) -> List[cst.Call]:
        """The calls in what the names read by `node` were assigned so far (two levels)."""
        found: List[cst.Call] = []
        if node is None or depth > 1:
            return found
        for name in set(_names_within(node)):
            for value in self.facts.assigned_values.get(name, ()):
                found.extend(calls_within(value))
                found.extend(self._calls_in_values_of(value, depth + 1))
        return found

    def _visit_method_call(self, node: cst.Call, func: cst.Attribute) -> None:
        method = func.attr.value
        receiver = dotted_name(func.value)
        if method == "backward" or (method == "step" and receiver and "optim" in receiver):
            self._note_training()
            self.training_calls.append(node)
            self._mark_training_loops(node)
        if receiver and self._is_statement_call(node):
            self._touch(receiver, node)
        if method == "requires_grad_" and not (node.args and _is_true(node.args[0].value)):
            self.facts.freezes_parameters = True
        if method == "cuda" or (
            method == "to" and node.args and is_fixed_gpu(node.args[0].value)
        ):
            self.facts.fixed_device_moves.append(node)
        if method in ("to", "cpu", "cuda"):
            base = func.value
            # Only through calls that return the module itself (`model.eval().cpu()`),
            # never through its output (`model.decode(z).cpu()`).
            while isinstance(base, cst.Call) and isinstance(base.func, cst.Attribute) and (
                    base.func.attr.value in _RETURNS_MODULE):
                base = base.func.value
            moved = dotted_name(base)
            if moved is not None:
                self.facts.device_moves.setdefault(moved, []).append(node)

    # --- loops -----------------------------------------------------------------------------------
    def visit_For(self, node: cst.For) -> None:
        for name in _names_within(node.iter):
            self.facts.loops_over.setdefault(name, []).append(node)
            # `loop = tqdm(loader)` ... `for x in loop`: the loop goes over the loader too.
            for wrapped in self.iteration_wrappers.get((self._function(), name), ()):
                self.facts.loops_over.setdefault(wrapped, []).append(node)
        if _slices_batches(node):
            self.facts.sliced_batch_loops.append(node)

    def _mark_training_loops(self, node: cst.CSTNode) -> None:
        """Every For loop whose body (not header) holds this backward() or step()."""
        child, parent = node, self.parents.get(node)
        while parent is not None and not isinstance(parent, cst.FunctionDef):
            if isinstance(parent, cst.For) and child is parent.body:
                self.facts.training_loops.add(parent)
            child, parent = parent, self.parents.get(parent)

    # --- environment ---------------------------------------------------------------------------
    def visit_Comparison(self, node: cst.Comparison) -> None:
        if len(node.comparisons) != 1:
            return
        right = node.comparisons[0].comparator
        if string_value(node.left) is not None or string_value(right) is not None:
            self.facts.string_comparisons.append(node)

    def visit_Subscript(self, node: cst.Subscript) -> None:
        if dotted_name(node.value) != "os.environ" or len(node.slice) != 1:
            return
        index = node.slice[0].slice
        if isinstance(index, cst.Index) and string_value(index.value) == "CUDA_VISIBLE_DEVICES":
            parent = self.parents.get(node)
            if isinstance(parent, cst.AssignTarget):
                self.facts.visible_devices_statements.append(self._statement(node))


def _init_takes_sampler(node: cst.ClassDef) -> bool:
    """A DataLoader subclass forwards `sampler=` unless its own __init__ drops it."""
    for statement in node.body.body:
        if isinstance(statement, cst.FunctionDef) and statement.name.value == "__init__":
            params = statement.params
            return isinstance(params.star_kwarg, cst.Param) or any(
                param.name.value == "sampler" for param in (*params.params, *params.kwonly_params)
            )
    return True


def _slices_batches(loop: cst.For) -> bool:
    """`for i in range(0, n, batch_size): xb = x[i:i + batch_size]`: batches cut by hand."""
    if not (
        isinstance(loop.target, cst.Name)
        and isinstance(loop.iter, cst.Call)
        and isinstance(loop.iter.func, cst.Name)
        and loop.iter.func.value == "range"
        and len(loop.iter.args) == 3
    ):
        return False
    index = loop.target.value
    found = []

    class _Slices(cst.CSTVisitor):
        def visit_Slice(self, node: cst.Slice) -> None:
            if isinstance(node.lower, cst.Name) and node.lower.value == index:
                found.append(node)

    loop.body.visit(_Slices())
    return bool(found)


_BUILTINS = frozenset(dir(builtins))
_RETURNS_MODULE = frozenset({"to", "cpu", "cuda", "train", "eval", "float", "double", "half",
                             "bfloat16", "requires_grad_"})


def _reached_when_run(module: cst.Module, names_in_top: Dict[cst.CSTNode, Set[str]]) -> Set[cst.CSTNode]:
    """Top-level statements that run when the file runs: module-level code, and the
    functions and classes it names, and those they name in turn. A library whose methods
    call .backward() trains nothing when imported or run, and is left alone."""
    definitions = {statement.name.value: statement for statement in module.body
                   if isinstance(statement, (cst.FunctionDef, cst.ClassDef))}
    pending = [statement for statement in module.body
               if not isinstance(statement, (cst.FunctionDef, cst.ClassDef))]
    reached: Set[cst.CSTNode] = set(pending)
    while pending:
        for name in names_in_top.get(pending.pop(), ()):
            definition = definitions.get(name)
            if definition is not None and definition not in reached:
                reached.add(definition)
                pending.append(definition)
    return reached


def _self_attributes(method: cst.FunctionDef) -> List[Tuple[str, Optional[cst.Assign]]]:
    """(attribute, the Assign that sets it, or None for a read) for each `self.x` in a method."""
    found: List[Tuple[str, Optional[cst.Assign]]] = []

    class _Attributes(cst.CSTVisitor):
        def visit_Assign(self, node: cst.Assign) -> None:
            for target in node.targets:
                name = dotted_name(target.target)
                if name and name.startswith("self.") and name.count(".") == 1:
                    found.append((name[5:], node))
            node.value.visit(self)

        def visit_AssignTarget(self, node: cst.AssignTarget) -> bool:
            return False

        def visit_Attribute(self, node: cst.Attribute) -> None:
            if isinstance(node.value, cst.Name) and node.value.value == "self":
                found.append((node.attr.value, None))

    method.body.visit(_Attributes())
    return found


def _walk_returns(function: cst.FunctionDef) -> List[cst.Return]:
    found: List[cst.Return] = []

    class _Returns(cst.CSTVisitor):
        def visit_Return(self, node: cst.Return) -> None:
            found.append(node)

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is function

    function.visit(_Returns())
    return found


def _names_bound_in(function: cst.FunctionDef) -> Set[str]:
    """Parameters and names assigned in a function (not those it declares global)."""
    params = function.params
    bound = {param.name.value for param in (*params.params, *params.kwonly_params,
                                            *params.posonly_params)}
    for star in (params.star_arg, params.star_kwarg):
        if isinstance(star, cst.Param):
            bound.add(star.name.value)
    declared_global: Set[str] = set()

    class _Bindings(cst.CSTVisitor):
        def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
            bound.update(_target_names(node.target))

        def visit_For(self, node: cst.For) -> None:
            bound.update(_target_names(node.target))

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            bound.update(_target_names(node.target))

        def visit_Global(self, node: cst.Global) -> None:
            declared_global.update(item.name.value for item in node.names)

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is function

    function.visit(_Bindings())
    return bound - declared_global


def _target_names(target: cst.BaseExpression) -> Set[str]:
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, (cst.Tuple, cst.List)):
        return set().union(*(_target_names(element.value) for element in target.elements))
    return set()


def calls_within(node: Optional[cst.CSTNode]) -> List[cst.Call]:
    """Every call inside a node, the node itself included."""
    found: List[cst.Call] = []
    if node is None:
        return found

    class _Calls(cst.CSTVisitor):
        def visit_Call(self, call: cst.Call) -> None:
            found.append(call)

    node.visit(_Calls())
    return found


def _names_within(node: cst.CSTNode) -> List[str]:
    found: List[str] = []

    class _Names(cst.CSTVisitor):
        def visit_Name(self, name: cst.Name) -> None:
            found.append(name.value)

        def visit_Attribute(self, attribute: cst.Attribute) -> bool:
            dotted = dotted_name(attribute)
            if dotted:
                found.append(dotted)
            return True

    node.visit(_Names())
    return found
