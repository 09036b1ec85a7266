"""What one read of a module found: a plain record at the bottom of the analysis package.

The queries over it live above, one concern a module (navigation, values, control), so
this module imports nothing of ddpify's but the node readers.
"""
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Optional, Union

import libcst as cst
from libcst.metadata import CodeRange

# Statement and Block are defined with the node readers, at the bottom of the package.
from ddpify.analysis.nodes import Block as Block
from ddpify.analysis.nodes import Statement as Statement
from ddpify.analysis.nodes import is_false

# What the body of any block holds: statements, or the small statements of a one-line
# suite (`def f(): return x`).
BlockItem = Union[cst.BaseStatement, cst.BaseSmallStatement]
# (the function, or None at module level; a name in it): where a value is held.
Holder = tuple[Optional[cst.FunctionDef], str]



# Where a function's result holds a value: (its index, the size of the returned tuple) for
# `return writer, log_dir`; WHOLE_VALUE for `return writer`.
Slot = tuple[int, int]
# An output of a module's forward: a position of the tuple it returns, or a key of its dict;
# and, per output, the submodules it is computed from (analysis.forward_outputs).
OutputKey = Union[int, str]
OutputParts = dict[OutputKey, frozenset[str]]
WHOLE_VALUE: Slot = (0, 0)


@dataclass(frozen=True)
class ConditionalPart:
    """`self.<attribute>`, which forward runs only where `test` (its outcome `runs_when`
    as the part runs) allows. `parameter` names the forward parameter the test reads, or is
    None where the test draws at random (every step may differ, so it always counts)."""

    attribute: str
    parameter: Optional[str]
    test: cst.BaseExpression
    runs_when: bool


@dataclass
class Loader:
    """A `name = DataLoader(...)` assignment."""

    name: str
    call: cst.Call
    statement: Statement
    function: Optional[cst.FunctionDef]
    dataset: Optional[cst.BaseExpression]
    keywords: dict[str, cst.Arg]
    # `DataLoader(ds, **loader_kwargs)`: the dict's name; its keys are known only at run time.
    kwargs_name: Optional[str] = None
    # `return DataLoader(...)`: the loader has no name here, only at the call sites.
    returned: bool = False
    # Built where it is used (`for x, y in DataLoader(...)`, `fit(model, DataLoader(...))`):
    # `name` is a stand-in no script can bind, and this is what the loader is called where it
    # is used (the parameter it is passed to, or "loader"); None for a loader with a name.
    inline: Optional[str] = None
    # Built as the iterable of a comprehension or generator, its only reader (`inline` is
    # then "loader"): a single pass, such as the one computing the data set's mean and std.
    comprehension: bool = False

    @property
    def shuffles(self) -> bool:
        shuffle = self.keywords.get("shuffle")
        return shuffle is not None and not is_false(shuffle.value)


@dataclass
class ExternalLoader:
    """A DataLoader this module iterates but another module of the project builds (and
    shards): `train_dl = utils.get_loader(cfg)`, or a loader handed to a helper module's
    Trainer. Only its sampler's epoch is this module's business."""

    name: str
    function: Optional[cst.FunctionDef]
    # Where this module receives it: the factory call's statement, or the function that
    # takes it as a parameter.
    statement: Union[Statement, cst.FunctionDef]
    # Where a report about it points.
    call: cst.CSTNode
    made_by: str


@dataclass
class ExternalLoaderDict:
    """A dict of DataLoaders that a function of another module of the project builds and
    returns (`loaders = data.get_dataloaders(cfg)`); that module shards the entries that look
    like training ones (returned_loaders.py). This module sets their epochs."""

    name: str
    function: Optional[cst.FunctionDef]
    # Where this module receives it: the factory call's statement, or the function handed it.
    statement: Union[Statement, cst.FunctionDef]
    # Where a report about it points: the factory call, or a loop over an entry.
    call: cst.CSTNode
    made_by: str
    # Every key, and whether its entry is sharded where it is built (all True for a dict
    # handed in: whichever the caller's module shards).
    sharded: dict[str, bool]


@dataclass
class LoaderDict:
    """DataLoaders kept in a dict by key: `{split: DataLoader(...) for split in ["train",
    "val"]}`, a dict literal of them, or `dict(train=DataLoader(...), ...)`."""

    name: str
    value: cst.BaseExpression
    statement: Statement
    function: Optional[cst.FunctionDef]
    # Each key with the DataLoader call that builds its entry: one call for every key of a
    # comprehension, one call a key for a literal.
    entries: dict[str, cst.Call]
    # A comprehension's key variable (`split`); None for a literal.
    key_variable: Optional[str] = None
    # Entries that name a loader built before (`{"train": train_loader, ...}`): its call is
    # the entry's in `entries`.
    named: dict[str, Loader] = field(default_factory=dict)
    # Filled one key a pass of a loop (`for split in ["train", "val"]: ... loaders[split] = dl`):
    # the loader `dl` named in the loop, which the dict's rule takes over from the data rule.
    filled_by: Optional[Loader] = None


@dataclass
class DictPass:
    """A loop over the batches of one entry of a LoaderDict: `for x, y in loaders[phase]`,
    or `for x, y in loader` inside `for phase, loader in loaders.items()`."""

    loop: cst.For
    # The dict's name where the loop runs (a parameter, if the dict was passed in).
    holder: str
    # The keys this pass may take, in the dict's order.
    keys: tuple[str, ...]
    # The variable that holds the key (`phase`); None for a literal key or `.values()`.
    key_variable: Optional[str]
    # The loop that picks the entry (`for phase in ...`, `for phase, loader in ...items()`),
    # which is not the epoch loop.
    key_loop: Optional[cst.For] = None
    # The call that hands the entry to the function whose loop this is
    # (`train_one_epoch(model, loaders["train"], ...)`): the epochs are counted around it.
    handed_by: Optional[cst.Call] = None
    # The entry's own name where `handed_by` runs, when that is a function the entry was handed
    # to (`train_dataloader`, a parameter): set_epoch goes on it there.
    handed_as: Optional[str] = None


@dataclass
class PhasePick:
    """A name bound to one of several DataLoaders per phase (`loader = train_loader` under
    `if phase == "train":`), whose batches a loop inside that phase loop goes over."""

    alias: str
    # The loaders' names, as the loop's function spells them, in source order.
    loaders: tuple[str, ...]
    # The loop that binds the alias (`for phase in ["train", "val"]`), not the epoch loop.
    phase_loop: cst.For


@dataclass
class Model:
    """A model whose `.parameters()` an optimizer trains."""

    name: str
    optimizer_statement: Statement
    function: Optional[cst.FunctionDef]
    # `fit(model.to(device), loader)`: the move in the call, hoisted onto a line of its own
    # before it (`model = model.to(device)`), with the wrap between the two.
    moved_in_call: Optional[cst.Call] = None
    # `train_fn(model, ...)` each epoch, whose body moves what it is handed: that move, with the
    # caller's arguments (`model.to(device)`), made before the wrap in the caller.
    moved_by_callee: Optional[str] = None


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
    # `"cuda" if ... else "cpu"`, or a lone string (`args.device = "cuda"`, `device =
    # "cuda:0"`): a string that the script may print, compare or format. Rule: a string device
    # stays a string of the same form: kept as written and refined after it ("cuda" is this
    # rank's GPU once the setup made it current; a GPU index becomes f"cuda:{local_rank}"),
    # never replaced by a torch.device with a CPU fallback the script did not have.
    is_string: bool = False
    # `torch.device("cpu")` or `"cpu"`, the CPU and nothing else: the user's explicit choice.
    # Rule: it stays the CPU under torchrun (Gloo, no device_ids, no GPU made current); the
    # setup never replaces it with a cuda-if-available device.
    only_cpu: bool = False
    # `device = 0  # cuda:0`: a GPU named by its index, an int the script may print or
    # format (`f"[GPU{gpu_id}]"`). Rule: an index stays an int, this rank's own
    # (`local_rank`), with the CPU only where CUDA is missing (where the original cannot run).
    is_index: bool = False


@dataclass
class FactRecord:
    module: cst.Module
    already_distributed: Optional[cst.CSTNode] = None
    trains: bool = False
    # A helper module of a project: what trains here runs when another module calls it, and
    # that module's script sets up the process group (library-style migration, plan.library).
    library: bool = False
    # A helper module that nothing in the project imports: its callers are out of view.
    unseen_callers: bool = False
    # In a helper module: `self.X` that a base class of this module's classes, in another
    # module of the project, sets from its __init__'s parameters (handed in by the caller).
    inherited_from_parameters: set[str] = field(default_factory=set)
    # In a helper module: `self.X` that classes of other modules derived from its classes read.
    read_by_derived_classes: set[str] = field(default_factory=set)
    # Per class of this module: `self.X` that a base class in another module of the project
    # sets to a SummaryWriter it makes, on rank 0 only there (Project.inherited_tracker_attributes).
    inherited_trackers: dict[str, set[str]] = field(default_factory=dict)
    # `self.X` that other base classes (mixins) of this module's classes, or of the classes
    # derived from them, read (Project.attributes_read_by_mixins): read where no guard follows.
    read_by_mixins: set[str] = field(default_factory=set)
    # `X` of every `obj.X` other modules of the project read on something other than `self`
    # (Project.attributes_read_on_objects), where a writer's class module makes it: unguarded there.
    read_on_objects_elsewhere: set[str] = field(default_factory=set)
    # The top-level names of this module that other modules of the project import.
    used_elsewhere: frozenset[str] = frozenset()
    # A module of the project (this one included) wraps something in DataParallel, which
    # the migration removes (Project.wraps_in_data_parallel).
    data_parallel_in_project: bool = False
    # A module of the project (this one included) may freeze parameters
    # (Project.freezes_parameters): a model this module is handed may be frozen where it is
    # wrapped, though nothing here changes requires_grad.
    freezes_parameters_in_project: bool = False
    # Where this module, or any module of its project, reads a `.dataset` that may be a
    # DataLoader's: (file relative to the project, or "" for this script alone, line).
    # Read only for a module with a DataLoader subclass of its own (subset_splits.subclass_split).
    loader_dataset_reads: tuple[tuple[str, int], ...] = ()
    # (class, method) of every method the classes of the project (or of this script) define.
    class_methods_in_project: frozenset[tuple[str, str]] = frozenset()
    # In a helper module: `self.X` its classes, or the project's classes derived from them,
    # use as a torch module (`self.model.train()`).
    module_attributes: set[str] = field(default_factory=set)
    # In a helper module, by class name: `X` for every `self.X` that a class derived from it
    # in another module of the project trains, and that this class moves (and so wraps).
    trained_in_derived: dict[str, set[str]] = field(default_factory=dict)
    # By class name: `X` for every `self.X` that a base class in another module of the project
    # moves, and wraps there (Project.base_moved_attributes).
    wrapped_in_bases: dict[str, set[str]] = field(default_factory=dict)
    # In a helper module: `X` where a class of the project keeps a module it moves, and wraps,
    # as `self.X` (Project.moved_self_attributes).
    moved_self_attributes: set[str] = field(default_factory=set)
    device_assignments: list[DeviceAssignment] = field(default_factory=list)
    loaders: list[Loader] = field(default_factory=list)
    external_loaders: list[ExternalLoader] = field(default_factory=list)
    external_loader_dicts: list[ExternalLoaderDict] = field(default_factory=list)
    # Passes over a loader made right there by another module of the project
    # (`for x, y in data.get_loader("train")`, `for batch in dm.train_dataloader()`): the
    # loop, with the call.
    external_inline_loaders: dict[cst.For, ExternalLoader] = field(default_factory=dict)
    # Names given an entry of such a dict that its module leaves whole (an evaluation
    # loader by look), with the entry: `val_loader` -> `loaders["val"]`.
    whole_entries: dict[str, str] = field(default_factory=dict)
    # Models handed to a Trainer of the project that moves them to their device itself: they
    # are wrapped there, after that move.
    models_moved_elsewhere: set[str] = field(default_factory=set)
    # `init_and_move(model, device)`, a function of another module of the project that moves
    # the module it is handed in place (and does not train it): name -> those calls.
    moved_by_helpers: dict[str, list[cst.Call]] = field(default_factory=dict)
    # Imports of a module chosen at run time that may be one of the project's (DDP909).
    dynamic_imports: list[cst.CSTNode] = field(default_factory=list)  # calls, `import _init_paths`
    # In a helper module: models handed in that reach their device here (wrapped here).
    models_moved_here: set[str] = field(default_factory=set)
    # In a helper module: a function's parameter moved there, a statement of its own, before
    # the function trains it (`def train(model, ...): model.to(device)`): wrapped there.
    parameters_moved_here: set[Holder] = field(default_factory=set)
    # For statements whose iterable mentions a name (a loader, usually), by that name.
    loops_over: dict[str, list[cst.For]] = field(default_factory=dict)
    # Passes written as one expression, by the name they go over: a comprehension (`[step(x, y)
    # for x, y in loader]`, `sum(step(b) for b in loader)`, the outermost comprehension node)
    # and `map(step, loader)` (the call).
    comprehension_passes: dict[str, list[cst.CSTNode]] = field(default_factory=dict)
    # Generator functions that pass over a parameter again and again (`while True: for x in
    # loader: yield x`, or `while True: yield from loader`): each by the call that makes
    # batches of it, with the loop (or the `yield from` statement) of each pass.
    generator_passes: dict[cst.Call, tuple[Union[cst.For, cst.SimpleStatementLine], str]] = field(
        default_factory=dict)
    # The passes of generator_passes whose batches a training loop draws.
    training_generator_passes: set[cst.CSTNode] = field(default_factory=set)
    models: list[Model] = field(default_factory=list)
    # Optimizers whose parameters come from no `X.parameters()` ddpify can name
    # (`models[0].parameters()`, a list of raw tensors): what they train cannot be wrapped.
    optimizers_without_model: list[cst.Call] = field(default_factory=list)
    # Optimizers over the parameters of each module of a collection ddpify cannot name
    # (`*[c.parameters() for c in criteria[1:]]`), with that collection.
    optimized_collections: list[tuple[cst.Call, cst.BaseExpression]] = field(default_factory=list)
    # (part, holder): a module of a container trained and called on its own (`self.nets.G(z)`,
    # `Adam(self.nets.G.parameters())`) where only the container reaches its device (`self.nets
    # = nn.ModuleDict(...).to(device)`) and is never called: a wrap of the container would
    # never run.
    parts_called_apart: list[tuple[Model, str]] = field(default_factory=list)
    # `fit(model.to(device), ...)`: a project function builds the optimizer over a value the
    # call makes or moves inside its argument list (collector._note_model_handed_unnamed).
    models_handed_unnamed: list[tuple[cst.Call, cst.BaseExpression]] = field(default_factory=list)
    # Statements that touch a name as a whole: `m = ...`, `m.to(...)`, `m.load_state_dict(...)`.
    statements_touching: dict[str, list[Statement]] = field(default_factory=dict)
    fixed_device_moves: list[cst.Call] = field(default_factory=list)
    # `.to(...)`, `.cpu()`, `.cuda()` on a name or an attribute chain, by that name
    # (`transformer.eval().cpu()` is under "transformer").
    device_moves: dict[str, list[cst.Call]] = field(default_factory=dict)
    # Calls of a function of another module of the project that returns the SummaryWriter it
    # makes (`writer = make_writer(log_dir)`, `writer, log_dir = make_run(root)`): it is None on
    # the other ranks. Each with the writer's place in what the function returns.
    calls_returning_trackers: list[tuple[cst.Call, Slot]] = field(default_factory=list)
    # (name, move) for a model moved by a loop over a container it was put into under an `if`
    # (`if args.critic: models.append(critic)`): the test, and whether it holds there (False in
    # the `else` branch); its wrap runs under it too.
    moved_under: dict[tuple[str, cst.Call], tuple[cst.BaseExpression, bool]] = field(default_factory=dict)
    # `device == "cuda"`, `"cuda" in device`: comparisons of a name with a string.
    string_comparisons: list[cst.Comparison] = field(default_factory=list)
    fixed_device_values: list[cst.BaseExpression] = field(default_factory=list)
    # `.to(config.DEVICE)` where another module of the project sets DEVICE = "cuda:0".
    moves_to_imported_fixed_gpu: list[cst.Call] = field(default_factory=list)
    # `model.to(device)` after `from config import device`, where config.py sets it to a device
    # type only (`torch.device("cuda" if ... else "cpu")`): this rank's GPU under the setup.
    moves_to_imported_device_type: list[cst.Call] = field(default_factory=list)
    # Every string literal naming a fixed GPU (`"cuda:0"`), wherever it is.
    fixed_gpu_strings: list[cst.SimpleString] = field(default_factory=list)
    set_device_statements: list[Statement] = field(default_factory=list)
    # `torch.cuda.device(i)` calls that a `with` enters.
    device_contexts: list[cst.Call] = field(default_factory=list)
    visible_devices_statements: list[Statement] = field(default_factory=list)
    output_statements: list[Statement] = field(default_factory=list)
    save_calls: list[cst.Call] = field(default_factory=list)
    # `print` handed on as a value (`trace_func=print`, `log = print`), not called here.
    print_values: list[cst.Name] = field(default_factory=list)
    # A function that writes a file handed on as a value, an argument of a call that calls it
    # later (`pool.submit(torch.save, state, path)`, `Thread(target=torch.save, ...)`).
    writers_handed_on: list[cst.BaseExpression] = field(default_factory=list)
    # Calls of the project's own helper functions that only compute, print or write files
    # (ddpify/project.py), or also print beside work every rank must do (MIXED), with that
    # effect; a statement call of one that prints or writes is in output_statements too.
    helper_effects: dict[cst.Call, str] = field(default_factory=dict)
    # Those of them defined in a module this run migrates too, which guards their output in
    # there (Project.guards_own_output): the call itself stays on every rank.
    guarded_in_helper: set[cst.Call] = field(default_factory=set)
    # For a MIXED helper: the positions of the arguments whose own attributes it reads.
    helper_attribute_readers: dict[cst.Call, set[int]] = field(default_factory=dict)
    # Calls of a function of another module of the project that runs a part of a module it is
    # handed (`compute_loss(out, y, model)` running `model.heads[0](x)`): its positional
    # parameters, and for each such parameter the line and the part of the first run.
    helper_part_runs: dict[cst.Call, tuple[list[str], dict[str, tuple[int, str]]]] = field(default_factory=dict)
    # Calls of a function of the project whose effect is unknown, and the positions of the
    # arguments it only reads attributes of, never running them (effects.attribute_only_readers).
    opaque_attribute_readers: dict[cst.Call, set[int]] = field(default_factory=dict)
    # Calls of another module's function that loads a state dict into a parameter it is
    # handed (`load_checkpoint(path, model, optimizer)`): the values passed for those.
    helper_state_loads: dict[cst.Call, list[cst.BaseExpression]] = field(default_factory=dict)
    # Calls of a function or method of another module that changes requires_grad of what it
    # is handed (`utils.set_trainable(model.backbone, True)`, `model.unfreeze_backbone()` on
    # an object of a project class): each value handed in (the object for a method), with
    # whether only part of it changes.
    helper_grad_changes: dict[cst.Call, list[tuple[cst.BaseExpression, bool]]] = field(default_factory=dict)
    # `x, y = batches.get_batch()`: calls of a method of an object of another module's class
    # that draws its batches from DataLoaders that class builds, and shards (draws_from_own_loaders).
    batches_from_project_loaders: set[cst.Call] = field(default_factory=set)
    # Calls of a function or class of another module of the project, whatever it does.
    project_calls: set[cst.Call] = field(default_factory=set)
    # Calls of a function of another module that names a folder from the clock there:
    # (the function's qualified name, the line in its module).
    clock_named_calls: dict[cst.Call, tuple[str, int, str]] = field(default_factory=dict)
    # Those whose function returns what it moved to a device (`net = get_network(args)`).
    calls_returning_moved: set[cst.Call] = field(default_factory=set)
    # Those whose function returns a model it wrapped in DataParallel (`net = define_tsnet(...)`).
    calls_returning_data_parallel: set[cst.Call] = field(default_factory=set)
    # Those that build an object of a class whose module sets requires_grad nowhere
    # (`TransformerNet()` beside a vgg.py that freezes its loss network).
    builds_never_frozen: set[cst.Call] = field(default_factory=set)
    # Calls of the project's helpers that take training steps (engine.train_one_epoch).
    training_helper_calls: list[cst.Call] = field(default_factory=list)
    # The positional parameters (after the object) of the method such a call runs on a project
    # object, where every class it may be has the same (`trainer.run_epoch(epoch)`: ["ep"]).
    method_parameters: dict[cst.Call, list[str]] = field(default_factory=dict)
    # `trainer.train()` where `trainer` is a training class of the project on one path and
    # something ddpify cannot read on another (DDP921): followed on neither.
    partly_followed_training: list[cst.Call] = field(default_factory=list)
    # `Trainer(model, loader, ...)` of a project class whose methods train.
    training_constructors: list[cst.Call] = field(default_factory=list)
    # A training helper or constructor of another module builds an optimizer itself: it names
    # the model it trains and wraps it there.
    helpers_build_optimizer: bool = False
    # One moves a model it is handed to its device (`self.net = net.to(device)`): it wraps it there.
    helpers_move_models: bool = False
    load_calls: list[cst.Call] = field(default_factory=list)
    # Calls of a function of another module of the project that reads a file with torch.load.
    helper_load_calls: list[cst.Call] = field(default_factory=list)
    # Calls of a function of another module of the project that loops over an argument without
    # a training step (`calc_loss_loader(train_loader, model, device, num_batches=5)`): the
    # arguments it evaluates over, as a loop of this file over them would.
    loaders_evaluated_elsewhere: dict[cst.Call, list[cst.BaseExpression]] = field(default_factory=dict)
    # Calls of a function or method of another module of the project that writes a file
    # somewhere inside (`fit(model, ...)` whose epoch loop saves the best model on rank 0).
    helper_write_calls: list[cst.Call] = field(default_factory=list)
    # Calls of a function of another module of the project that downloads or unpacks data
    # (`prepare_data(root)`): its barriers need the group joined before the call.
    helper_download_calls: list[cst.Call] = field(default_factory=list)
    # A model handed to a class of another module that keeps it as self.X: "model" ->
    # ["trainer.model"], where it is read from outside the class.
    kept_on_instances: dict[str, list[str]] = field(default_factory=dict)
    # Calls of a training function of another module that returns a value picked from its
    # own batches (an LR finder's choice, picked.py): where in the returned value it sits.
    calls_returning_picked: dict[cst.Call, set[Optional[int]]] = field(default_factory=dict)
    # `Trainer(model, loader).fit(epochs)`: methods called on an object made in place.
    chained_calls: list[cst.Call] = field(default_factory=list)
    main_guard: Optional[cst.If] = None
    data_parallel_calls: list[cst.Call] = field(default_factory=list)
    # Calls of a DataParallel subclass whose constructor does not take the module first
    # (`BalancedDataParallel(gpu0_bsz, model)`): ddpify cannot tell what it wraps.
    unreadable_data_parallel_calls: list[cst.Call] = field(default_factory=list)
    batchnorm_calls: list[cst.Call] = field(default_factory=list)
    # Names bound to what a function of another module of the project returns, by the
    # function's full name (`utils.get_loaders`).
    made_in_other_modules: dict[str, str] = field(default_factory=dict)
    # Callees, as this module spells them (`accuracy`, `metrics.psnr`), of functions of
    # another module of the project that return a Python number on every return.
    number_functions: set[str] = field(default_factory=set)
    # Output calls (print, torch.save) that are one small statement of a one-line suite.
    output_calls_in_suites: list[cst.Call] = field(default_factory=list)
    # The callables of `made_in_other_modules` that are running-mean classes (meters.py).
    running_mean_makers: dict[str, str] = field(default_factory=dict)
    # Functions of this file that return a tuple of DataLoaders their callers unpack into
    # names (values.note_loaders_returned_in_a_tuple): sharded by look, like another module's.
    tuple_loader_factories: set[cst.FunctionDef] = field(default_factory=set)
    # Those of them that are batches made by hand (a generator, an iterator class of the
    # project's own), by the same full name: no DataLoader, so nothing shards them.
    batches_made_in_other_modules: dict[str, str] = field(default_factory=dict)
    # Per call of the project's training function or Trainer: the arguments it iterates.
    iterated_arguments: dict[cst.Call, list[cst.BaseExpression]] = field(default_factory=dict)
    # ... and the entries of a dict argument it iterates: (the argument, the string key).
    iterated_entries: dict[cst.Call, list[tuple[cst.BaseExpression, str]]] = field(default_factory=dict)
    # Some parameter's requires_grad is set (`p.requires_grad = fine_tune`,
    # `requires_grad_(False)`): a model may reach its wrap with nothing to train.
    freezes_parameters: bool = False
    # What each of those changes works on, by its dotted name (`teacher` for
    # `teacher.requires_grad_(False)` or `for p in teacher.parameters(): p.requires_grad = False`),
    # None where the reading cannot tell (a loop over a list of models, a helper's parameter).
    frozen_receivers: list[Optional[str]] = field(default_factory=list)
    # The names an optimizer is assigned to (`opt = torch.optim.Adam(...)`, `self.opt = ...`):
    # `opt.step()` steps it, whatever the name says.
    optimizer_names: set[str] = field(default_factory=set)
    # Calls that make a batch sampler of another module of the project that shards by rank
    # itself and has set_epoch (project.batch_sampler_by_rank).
    rank_aware_batch_samplers: set[cst.Call] = field(default_factory=set)
    # Map-style Dataset subclasses defined in the file.
    dataset_classes: set[str] = field(default_factory=set)
    # Classes of the file that are torch.nn.Module subclasses (directly, or through another
    # such class of the file): `.to(device)` on one of their objects moves every part.
    module_classes: set[str] = field(default_factory=set)
    # Every node of the module by its exact type, in source order, and the statements of
    # each function's own body (None: module level and class bodies) by type: the
    # collector's one walk fills both, so queries over the whole module or a function's body
    # do not walk it again (navigation.Navigation.nodes_of, own_statements).
    nodes_by_type: dict[type, list[cst.CSTNode]] = field(default_factory=dict)
    statements_by_function: dict[tuple[Optional[cst.FunctionDef], type], list[cst.CSTNode]] = field(
        default_factory=dict)
    # Submodules a module class creates in __init__ but no other method uses, by class name.
    unused_submodules: dict[str, list[cst.Assign]] = field(default_factory=dict)
    # Submodules forward runs only on some calls (a test on a parameter of forward, a random
    # draw), with that forward, by class name (analysis.conditional_parts).
    conditional_submodules: dict[str, tuple[cst.FunctionDef, list[ConditionalPart]]] = field(
        default_factory=dict)
    # The same for classes of other modules of the project, by the name this module calls
    # them by (`EncoderCNN` -> ["resnet"]).
    gradless_project_classes: dict[str, list[str]] = field(default_factory=dict)
    # Classes of other modules of the project built here whose __init__ builds a lazy layer,
    # by the name they are called by: that layer's qualified name (rules/lazy_layers.py).
    lazy_project_classes: dict[str, str] = field(default_factory=dict)
    # Functions and classes of other modules of the project, by the name they are called by,
    # whose result keeps a deep copy of the module handed in: "" for the result itself, else
    # the attribute that holds it (`ema.shadow`); rules/early_copies.py.
    project_copies: dict[str, str] = field(default_factory=dict)
    # For a module class whose forward returns several outputs (`return logits, aux`), the
    # submodules each output is computed from, by output (analysis.forward_outputs); by
    # class name in this file, by the name this module calls them by for another module's.
    forward_output_parts: dict[str, OutputParts] = field(default_factory=dict)
    # `m = torch.compile(m)` statements, by model name.
    compile_statements: dict[str, list[Statement]] = field(default_factory=dict)
    # `from M import DataParallel as DP` (a subclass too): (M, the name, the alias or None).
    data_parallel_imports: list[tuple[str, str, Optional[str]]] = field(default_factory=list)
    # Other mentions of DataParallel, such as isinstance(model, nn.DataParallel).
    data_parallel_references: list[cst.BaseExpression] = field(default_factory=list)
    # `model.module`, by the dotted name of the model.
    module_accesses: dict[str, list[cst.Attribute]] = field(default_factory=dict)
    # `x.attr` read (not assigned) on a dotted name, by that name.
    attribute_reads: dict[str, list[cst.Attribute]] = field(default_factory=dict)
    # `x.attr = ...` on a dotted name, by that name.
    attribute_writes: dict[str, list[cst.Attribute]] = field(default_factory=dict)
    # Data: DataLoader and IterableDataset subclasses defined here (a loader class maps to
    # whether its constructor takes `sampler=`), what each name is assigned, loops whose
    # body trains, statements that download a dataset, loops that slice batches by hand.
    loader_classes: dict[str, bool] = field(default_factory=dict)
    iterable_dataset_classes: set[str] = field(default_factory=set)
    assigned_values: dict[str, list[cst.BaseExpression]] = field(default_factory=dict)
    random_sampler_calls: set[cst.Call] = field(default_factory=set)
    # Every DataLoader call, also those that are no `name = DataLoader(...)` (a dict of them).
    loader_calls: list[cst.Call] = field(default_factory=list)
    # The stand-in names of the loaders built where they are used (Loader.inline), by call.
    inline_loader_names: dict[cst.CSTNode, str] = field(default_factory=dict)
    # `super().__init__(...)` calls: in a DataLoader subclass, the loader being built.
    super_init_calls: list[cst.Call] = field(default_factory=list)
    training_loops: set[cst.For] = field(default_factory=set)
    # `loss.backward()` and `optimizer.step()` calls, wherever they are.
    training_calls: list[cst.Call] = field(default_factory=list)
    # Loops that train through a call (`self._run_batch(x, y)` calls backward).
    loops_calling_training: set[cst.For] = field(default_factory=set)
    # Functions that train: their body calls backward() or step(), or calls one that does.
    training_functions: set[cst.FunctionDef] = field(default_factory=set)
    # Functions whose batch loop trains only through a callable parameter (`process_fn(batch)`):
    # the parameters a call must hand a step function for its pass to train (step_callbacks.py).
    step_parameters: dict[cst.FunctionDef, set[str]] = field(default_factory=dict)
    download_statements: list[Statement] = field(default_factory=list)
    sliced_batch_loops: list[cst.For] = field(default_factory=list)
    # Functions and methods by name, and calls of them by bare or `self.` name.
    functions: dict[str, cst.FunctionDef] = field(default_factory=dict)
    # Classes defined here, by name, with their __init__ (None when they inherit it).
    class_inits: dict[str, Optional[cst.FunctionDef]] = field(default_factory=dict)
    # Every class defined here, by name (FSDP2 looks in a model class for its repeated blocks).
    classes: dict[str, cst.ClassDef] = field(default_factory=dict)
    calls_by_callee: dict[str, list[cst.Call]] = field(default_factory=dict)
    # Names and attributes an f-string formats whole (`f"{model}"`), by dotted name.
    formatted_values: dict[str, list[cst.BaseExpression]] = field(default_factory=dict)
    # Every call by the qualified name of what it calls (`tqdm.tqdm`, `builtins.open`).
    calls_named: dict[str, list[cst.Call]] = field(default_factory=dict)
    bound_names: set[str] = field(default_factory=set)
    # Names ddpify gave a loader's sampler or dataset, by (function, loader name, kind).
    derived_names: dict[tuple[Optional[cst.FunctionDef], str, str], str] = field(
        default_factory=dict, repr=False)
    # `self.x = value` in each method: {method: {"self.x": [value, ...]}}.
    self_assignments: dict[cst.FunctionDef, dict[str, list[cst.BaseExpression]]] = field(
        default_factory=dict)
    local_names: dict[cst.FunctionDef, set[str]] = field(default_factory=dict, repr=False)
    # ValueFlow._callee's answers, by callee name.
    callees: dict[str, tuple[Optional[cst.FunctionDef], bool]] = field(default_factory=dict, repr=False)
    positions: Mapping[cst.CSTNode, CodeRange] = field(default_factory=dict, repr=False)
    parents: dict[cst.CSTNode, cst.CSTNode] = field(default_factory=dict, repr=False)
