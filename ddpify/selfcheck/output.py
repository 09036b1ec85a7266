"""Prints and writes that run once the process group is joined are on rank 0 only (DDP913),
and what every rank must do together (a backward, a collective, a draw from a random generator
whose later draws must agree) is never on rank 0 only (DDP916)."""
import ast
from collections.abc import Iterator
from typing import Optional

from ddpify.selfcheck.models import wraps
from ddpify.selfcheck.source import (
    FUNCTIONS,
    Scope,
    Source,
    assigned_targets,
    dotted,
    is_rank_zero_test,
    last_part,
)

Finding = tuple[str, int, str]

# Called as `name(...)` or `module.name(...)`: each prints, writes or makes a file, or opens or
# writes a TensorBoard log (tensorboard_logger's functions too). (wandb is left out: ddpify
# keeps its calls on every rank and disables the run on the others with `mode=`.)
WRITERS = frozenset({"print", "torch.save", "os.makedirs", "os.mkdir", "json.dump", "pickle.dump",
                     "np.save", "np.savez", "np.savetxt", "numpy.save", "save_image", "shutil.copy",
                     "shutil.copyfile", "shutil.copy2", "shutil.move", "os.rename", "os.replace",
                     "os.remove", "os.unlink", "SummaryWriter", "sys.stdout.write", "pprint.pprint",
                     "log_value", "tensorboard_logger.configure", "tensorboard_logger.log_value",
                     "tensorboard_logger.Logger"})
# Called by the name they were imported from (an alias resolved): model files, TorchScript
# and exported programs, safetensors weights.
QUALIFIED_WRITERS = frozenset({"torch.jit.save", "torch.onnx.export", "torch.export.save",
                               "safetensors.torch.save_file", "safetensors.torch.save_model",
                               "safetensors.numpy.save_file", "joblib.dump", "scipy.io.savemat",
                               "omegaconf.OmegaConf.save", "shutil.make_archive", "mlflow.log_metric",
                               "mlflow.log_metrics", "mlflow.log_param", "mlflow.log_params",
                               "mlflow.log_artifact", "mlflow.log_artifacts", "mlflow.pytorch.log_model",
                               # a plot window per rank; TensorFlow's and tensorboardX's event files
                               "matplotlib.pyplot.show", "matplotlib.pyplot.pause",
                               "tensorflow.summary.FileWriter", "tensorflow.compat.v1.summary.FileWriter",
                               "tensorflow.summary.create_file_writer", "tensorboardX.FileWriter",
                               # torchvision's image grid, by whatever alias (`vutils.save_image`)
                               "torchvision.utils.save_image"})
# Log handlers that open their file when built: written on every rank unless the path is
# rank 0's (`FileHandler(path if is_main else os.devnull)`, what ddpify emits).
FILE_HANDLERS = frozenset({"logging.FileHandler", "logging.handlers.RotatingFileHandler",
                           "logging.handlers.TimedRotatingFileHandler", "logging.handlers.WatchedFileHandler"})
# Files of a format opened with a mode, as `open` is: written when the mode says so.
FORMAT_OPENERS = frozenset({"h5py.File", "zipfile.ZipFile", "tarfile.open"})
# Of those, names a project's own helper takes too (`from utils import save_image`): imported
# from a module that is not torch's, the call is the project's, which guards its own writes
# where its module is migrated as well, and is guarded here otherwise (the migration's effects).
HELPER_NAMES_TOO = frozenset({"save_image"})
# Called as a method of anything, given a path: `fig.savefig(...)`, `frame.to_csv(path)`
# (with no path, `frame.to_csv()` returns the text and writes nothing).
# `model.save_pretrained(folder)` (a Hugging Face model, tokenizer or config) writes a folder.
WRITING_METHODS = frozenset({"savefig", "to_csv", "to_json", "to_parquet", "to_excel", "to_pickle",
                             "save_pretrained"})
# pathlib's writers, on a path of any spelling: `Path(out, "loss.txt").write_text(text)`.
PATH_WRITERS = frozenset({"write_text", "write_bytes"})
PATH_KEYWORDS = frozenset({"path_or_buf", "path", "excel_writer", "fname", "save_directory"})
JOINS = "init_process_group"
# Calls that make a Pillow image (last part of the name), which writes itself with `.save(path)`;
# ToPILImage makes a transform that makes one.
IMAGE_MAKERS = frozenset({"fromarray", "to_pil_image", "frombytes", "frombuffer"})
IMAGE_MAKERS_ON_IMAGE = frozenset({"new", "open", "merge", "blend", "composite"})  # `Image.new(...)`
IMAGE_TRANSFORMS = frozenset({"ToPILImage"})
# TorchScript modules, which save themselves too (`torch.jit.trace(model, x).save(path)`).
SCRIPT_MAKERS = ("jit.trace", "jit.script", "jit.trace_module")


def unguarded_output(migrated: Source) -> Iterator[Finding]:
    reach = _Reach(migrated)
    buffers = _in_memory_files(migrated)
    images = _Images(migrated)
    for call in migrated.calls:
        qualified = migrated.qualified(call.func)
        writes = _writes(call) or qualified in QUALIFIED_WRITERS or images.saves(call) or (
            qualified in FORMAT_OPENERS and _opens_for_writing(call)) or (
            qualified in FILE_HANDLERS and not _rank_zero_path(call))
        if writes and not migrated.guarded(call) and reach.after_join(call) and not any(
                dotted(arg) in buffers for arg in call.args) and not _helper_of_elsewhere(migrated, call):
            yield "DDP913", call.lineno, f"`{_short(call)}` runs on every rank"
        handed = next((arg for arg in call.args if _is_writer(migrated, arg)), None)
        if handed is not None and not migrated.guarded(call) and reach.after_join(call):
            yield "DDP913", call.lineno, (f"`{_short(call)}` hands on `{ast.unparse(handed)}`, which then writes "
                                          "on every rank")


def _is_writer(source: Source, value: ast.expr) -> bool:
    """`torch.save` in `pool.submit(torch.save, state, path)`: a writer handed on, not called."""
    return isinstance(value, (ast.Name, ast.Attribute)) and (
        dotted(value) in WRITERS - {"print"} or source.qualified(value) in QUALIFIED_WRITERS) or isinstance(
        value, ast.Attribute) and value.attr in WRITING_METHODS


# Calls every rank must make together: a backward (DDP all-reduces the gradients in it), the
# collectives, the epoch of a DistributedSampler (the ranks' shares must agree).
SHARED_WORK = frozenset({"backward", "set_epoch", "all_reduce", "all_gather", "all_gather_object",
                         "reduce_scatter", "broadcast", "every_rank"})


def shared_work_on_rank0(migrated: Source) -> Iterator[Finding]:
    """`if is_main: with open(log) as f: ... loss.backward()`: rank 0 waits for ranks that
    never come (NCCL hangs until its watchdog ends the job)."""
    for call in migrated.calls:
        if last_part(call.func) in SHARED_WORK and _under_rank_zero_if(migrated, call):
            yield "DDP916", call.lineno, f"`{_short(call)}` runs on rank 0 only"


def moves_on_rank0(migrated: Source) -> Iterator[Finding]:
    """`if is_main: with open("arch.txt", "w") as f: f.write(str(model)); model.to(device)`:
    a device move of a model that a DDP call wraps, under a rank-0 guard: the other ranks wrap
    the model where it was (the CPU), which DDP refuses with this rank's device_ids on a GPU
    and Gloo on the CPU lets pass. The move must run on every rank; only the write is rank 0's."""
    wrapped = {name for name, _ in wraps(migrated)}
    for receiver, call in migrated.moves():
        if receiver in wrapped and _under_rank_zero_if(migrated, call):
            yield "DDP916", call.lineno, (f"`{_short(call)}` moves `{receiver}`, which a DDP call wraps, on rank 0 "
                                          "only: the other ranks wrap it where it was")


def wrapped_forwards_on_rank0(migrated: Source) -> Iterator[Finding]:
    """`if is_main: np.save(path, model(x).cpu().numpy())` after `model = DDP(model, ...)`:
    the wrapper's forward syncs the model's buffers (BatchNorm statistics) from rank 0 in a
    collective, so on rank 0 alone it waits for ranks that never join it (and, under
    autograd, readies a gradient all-reduce they never make). A call of the wrapped name
    under a rank-0 guard, in the wrap's own function (or anywhere, for a wrap of a global or
    of a `self.` attribute), is that forward."""
    wrapped: dict[str, list[ast.AST]] = {}
    for name, call in wraps(migrated):
        scope = migrated.scope_of(call)
        wrapped.setdefault(name, []).append(
            scope if isinstance(scope, FUNCTIONS) and not name.startswith("self.") else migrated.tree)
    for call in migrated.calls:
        called = dotted(call.func)
        if called is None or called not in wrapped or not _under_rank_zero_if(migrated, call):
            continue
        if any(scope is migrated.tree or scope in migrated.ancestors(call) for scope in wrapped[called]):
            yield "DDP916", call.lineno, (
                f"`{_short(call)}` runs the DDP-wrapped `{called}` on rank 0 only: its forward is a collective "
                "(buffers broadcast from rank 0); run it on every rank into a name, and guard only the write")
    yield from _wrapped_handed_away_on_rank0(migrated, wrapped)


def _wrapped_handed_away_on_rank0(migrated: Source, wrapped: dict[str, list[ast.AST]]) -> Iterator[Finding]:
    """`if is_main: print(evaluate(model, val_loader))` with `evaluate` imported from another
    module: this file cannot see what the function does with the wrapper, and an evaluation
    runs its forward (a collective) and, migrated, gathers its figures; on rank 0 alone both
    wait for ranks that never come. The whole wrapper handed to such a function under a
    rank-0 guard is that; `model.module` (the plain model) is not. A writer the file names
    (`save_model(model, path)`) saves it, a defect of its own (DDP922), and wandb keeps to
    every rank (its calls are left there)."""
    for call in migrated.calls:
        callee = dotted(call.func)
        if callee is None or callee.split(".")[0] not in migrated.imported_from_elsewhere \
                or callee.split(".")[0] == "wandb" or not _under_rank_zero_if(migrated, call) \
                or _writes(call) or migrated.qualified(call.func) in QUALIFIED_WRITERS:
            continue
        for argument in [*call.args, *(keyword.value for keyword in call.keywords)]:
            name = dotted(argument)
            if name in wrapped and any(scope is migrated.tree or scope in migrated.ancestors(call)
                                       for scope in wrapped[name]):
                yield "DDP916", call.lineno, (
                    f"`{_short(call)}` hands the DDP-wrapped `{name}` to a function of another module on rank 0 "
                    "only: its forward (and any gather) is a collective; call it on every rank into a name, "
                    "and guard only the write")


# Draws from a global random generator, by generator: torch's (its sampling functions, a
# split that takes no generator of its own, the init of a layer's weights), numpy's, Python's.
TORCH_DRAWS = frozenset({"rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like",
                         "normal", "bernoulli", "multinomial", "poisson"})
WEIGHTED_LAYERS = frozenset({"Linear", "Bilinear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d",
                             "ConvTranspose2d", "ConvTranspose3d", "Embedding", "EmbeddingBag", "LSTM",
                             "GRU", "RNN", "LSTMCell", "GRUCell", "RNNCell", "MultiheadAttention",
                             "Transformer", "TransformerEncoderLayer", "TransformerDecoderLayer"})
NOT_DRAWS = frozenset({"seed", "default_rng", "RandomState", "Generator", "get_state", "set_state",
                       "getstate", "setstate", "Random", "SystemRandom"})
RESEEDS = frozenset({"manual_seed", "seed", "set_seed", "seed_everything"})


def draws_on_rank0_only(migrated: Source) -> Iterator[Finding]:
    """`if is_main: torch.save(Backbone().state_dict(), path)` before the data is drawn: rank 0
    alone takes numbers from the generator, so every later draw from it (the synthetic data,
    random_split, the folds' permutation) differs per rank, with no error: the ranks train on
    different data. A draw later in a loop (noise, dropout) may differ per rank as it is; a
    seed set again between the two makes the streams agree. Weights drawn later differ per
    rank too, but the wrap broadcasts rank 0's: only later samples count."""
    drawn_on_rank0 = [(call, generator) for call in migrated.calls if _under_rank_zero_if(migrated, call)
                      and (generator := _generator_drawn(migrated, call) or _drawn_by_function(migrated, call))]
    for guarded, generator in drawn_on_rank0:
        later = next((call for call in migrated.calls if call.lineno > guarded.lineno
                      and _generator_drawn(migrated, call, samples_only=True) == generator
                      and not migrated.guarded(call) and not _in_a_loop(migrated, call)), None)
        if later is None or _reseeded_between(migrated, guarded.lineno, later.lineno):
            continue
        yield "DDP916", guarded.lineno, (
            f"`{_short(guarded)}` draws from {generator}'s random generator on rank 0 only: what is drawn "
            f"after it (`{_short(later)}`, output line {later.lineno}) differs per rank; draw it on every rank")


def _generator_drawn(source: Source, call: ast.Call, samples_only: bool = False) -> Optional[str]:
    """The global generator `call` draws from: "torch", "numpy", "Python"'s `random`, or None
    (a call given a generator of its own draws from that one). `samples_only`: not the initial
    weights of a layer or a model."""
    name = dotted(call.func) or ""
    name = source.imported_as.get(name, name)
    last = name.rsplit(".", 1)[-1]
    if last in NOT_DRAWS or any(keyword.arg == "generator" for keyword in call.keywords):
        return None
    if name.startswith(("np.random.", "numpy.random.")):
        return "numpy"
    if name.startswith("random.") and "random" in source.module_names:
        return "Python"
    if name.startswith("torch.") and last in TORCH_DRAWS or name.startswith(("torch.nn.init.", "nn.init.")):
        return "torch"
    if last == "random_split":
        return "torch"
    if samples_only:
        return None
    if name.startswith(("nn.", "torch.nn.")) and last in WEIGHTED_LAYERS:
        return "torch"
    # `Backbone().state_dict()`: a model (a class, by its name) made for its fresh weights.
    parent = source.parents.get(call)
    if isinstance(parent, ast.Attribute) and parent.attr == "state_dict" and last[:1].isupper():
        return "torch"
    return None


def _drawn_by_function(source: Source, call: ast.Call) -> Optional[str]:
    """The generator a function of this file draws from, where `call` calls it by name
    (`torch.save(make_series(), path)`): one level down, as the function's own calls show."""
    if not isinstance(call.func, ast.Name):
        return None
    for function in source.functions.get(call.func.id, ()):
        for inner in source.calls_in(function):
            generator = _generator_drawn(source, inner)
            if generator is not None:
                return generator
    return None


def _in_a_loop(source: Source, node: ast.AST) -> bool:
    for ancestor in source.ancestors(node):
        if isinstance(ancestor, (ast.For, ast.While, ast.AsyncFor)):
            return True
        if isinstance(ancestor, FUNCTIONS):
            return False
    return False


def _reseeded_between(source: Source, first: int, last: int) -> bool:
    return any(first < call.lineno < last and last_part(call.func) in RESEEDS and not source.guarded(call)
               for call in source.calls)


def _under_rank_zero_if(source: Source, node: ast.AST) -> bool:
    """In the body of an `if` that only rank 0 enters (not after a barrier the others wait
    at, where rank 0 only goes first)."""
    child = node
    for ancestor in source.ancestors(node):
        if isinstance(ancestor, ast.If) and child in ancestor.body and is_rank_zero_test(ancestor.test):
            return True
        child = ancestor
    return False


def _helper_of_elsewhere(source: Source, call: ast.Call) -> bool:
    name = dotted(call.func)
    return name in HELPER_NAMES_TOO and name in source.imported_from_elsewhere


def _writes(call: ast.Call) -> bool:
    name = dotted(call.func)
    if name in WRITERS or (isinstance(call.func, ast.Attribute) and call.func.attr in WRITING_METHODS and (
            call.args or any(keyword.arg in PATH_KEYWORDS for keyword in call.keywords))):
        return True
    if isinstance(call.func, ast.Attribute) and call.func.attr in PATH_WRITERS and (call.args or call.keywords):
        return True
    if name == "open":
        return not _rank_zero_path(call) and _opens_for_writing(call)
    return False


def _opens_for_writing(call: ast.Call) -> bool:
    """`open(path, mode)` (or a format's opener) with a literal mode that writes."""
    mode = call.args[1] if len(call.args) > 1 else next(
        (keyword.value for keyword in call.keywords if keyword.arg == "mode"), None)
    return isinstance(mode, ast.Constant) and isinstance(mode.value, str) and any(
        letter in mode.value for letter in "wax+")


class _Images:
    """`picture.save(path)`, `Image.fromarray(a).convert("L").save(path)`,
    `to_image(x).save(path)`, `torch.jit.trace(model, x).save(path)`: `.save` of a Pillow
    image or a TorchScript module, made by a call named above or bound to a name assigned
    one (anywhere in the file)."""

    def __init__(self, source: Source) -> None:
        self.bound: dict[str, list[ast.expr]] = {}
        for assignment in source.assignments:
            if assignment.value is not None:
                for target in assigned_targets(assignment):
                    self.bound.setdefault(target, []).append(assignment.value)

    def saves(self, call: ast.Call) -> bool:
        return isinstance(call.func, ast.Attribute) and call.func.attr == "save" and bool(
            call.args) and self._image(call.func.value, 0)

    def _image(self, value: ast.expr, depth: int) -> bool:
        if depth > 3:
            return False
        if isinstance(value, ast.Name):
            return any(self._image(each, depth + 1) for each in self.bound.get(value.id, ()))
        if not isinstance(value, ast.Call):
            return False
        name = dotted(value.func) or ""
        if last_part(value.func) in IMAGE_MAKERS or name.endswith(tuple(
                f"Image.{maker}" for maker in IMAGE_MAKERS_ON_IMAGE)) or name.endswith(SCRIPT_MAKERS):
            return True
        if isinstance(value.func, ast.Call):  # `T.ToPILImage()(x)`
            return last_part(value.func.func) in IMAGE_TRANSFORMS
        if isinstance(value.func, ast.Attribute):  # `.convert("L")` on an image
            return self._image(value.func.value, depth + 1)
        return isinstance(value.func, ast.Name) and any(  # `to_image = T.ToPILImage()`
            isinstance(each, ast.Call) and last_part(each.func) in IMAGE_TRANSFORMS
            for each in self.bound.get(value.func.id, ()))


def _in_memory_files(source: Source) -> set[str]:
    """Names bound only to `io.BytesIO()` / `io.StringIO()`: a save into one writes no file."""
    bound: dict[str, bool] = {}
    for assignment in source.assignments:
        value = assignment.value
        in_memory = isinstance(value, ast.Call) and (last_part(value.func) or "") in ("BytesIO", "StringIO")
        for target in assigned_targets(assignment):
            bound[target] = bound.get(target, True) and in_memory
    return {name for name, in_memory in bound.items() if in_memory}


def _rank_zero_path(call: ast.Call) -> bool:
    """`open(path if is_main else os.devnull, "w")`: the other ranks write nothing anywhere."""
    path = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg in ("file", "filename")), None)
    return isinstance(path, ast.IfExp) and dotted(path.orelse) == "os.devnull" and is_rank_zero_test(path.test)


def _short(call: ast.Call) -> str:
    text = ast.unparse(call)
    return text if len(text) <= 60 else text[:57] + "..."


class _Reach:
    """Whether a call may run, unguarded, after `init_process_group`: after a join (or a call
    of a function that joins) earlier in its own function, or in a function that some
    unguarded call site reaches that way. A function never called here is not followed."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.joining: dict[int, bool] = {}
        self.entered: dict[int, bool] = {}
        self.sites: dict[str, list] = {}
        self.joins_anywhere: Optional[bool] = None
        for call in source.calls:
            name = self._called_function(call)
            if name is not None:
                self.sites.setdefault(name, []).append(call)
        # A function handed on as a value (`run_callbacks([save_cb], ...)`, `Thread(target=dump)`)
        # runs where the code it is handed to calls it: from the reference on.
        for node in source.nodes:
            if type(node) is ast.Name and node.id in source.functions and isinstance(node.ctx, ast.Load):
                parent = source.parents.get(node)
                if not (isinstance(parent, ast.Call) and parent.func is node):
                    self.sites.setdefault(node.id, []).append(node)

    def _called_function(self, call: ast.Call) -> Optional[str]:
        """The name of a function of this file that `call` calls, by name: `train(...)`,
        `self.save(...)`, `Trainer(...)` (its __init__); not `torch.save(...)`."""
        if isinstance(call.func, ast.Attribute):
            base = dotted(call.func.value)
            if base is not None and base.split(".")[0] in self.source.module_names:
                return None
        name = last_part(call.func)
        return name if name in self.source.functions else None

    def after_join(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Name) or self._in_lambda(node):
            # A lambda's body, or a function handed on by name, runs when something calls it,
            # which may be after any join.
            return self._joins_anywhere()
        scope = self.source.scope_of(node)
        if self._joins_before(scope, node.lineno):
            return True
        return isinstance(scope, FUNCTIONS) and self._entered_after_join(scope)

    def _joins_anywhere(self) -> bool:
        if self.joins_anywhere is None:
            self.joins_anywhere = any(self._joins(call) for call in self.source.calls)
        return self.joins_anywhere

    def _in_lambda(self, node: ast.AST) -> bool:
        for ancestor in self.source.ancestors(node):
            if isinstance(ancestor, ast.Lambda):
                return True
            if isinstance(ancestor, (ast.stmt, *FUNCTIONS)):
                return False
        return False

    def _joins_before(self, scope: Scope, line: int) -> bool:
        return any(call.lineno < line and self._joins(call) for call in self.source.calls_in(scope))

    def _joins(self, call: ast.Call) -> bool:
        if last_part(call.func) == JOINS:
            return True
        name = self._called_function(call)
        return name is not None and any(self._function_joins(function) for function in self.source.functions[name])

    def _function_joins(self, function: ast.AST) -> bool:
        key = id(function)
        if key not in self.joining:
            self.joining[key] = False  # a recursive call adds nothing
            assert isinstance(function, FUNCTIONS)
            self.joining[key] = any(self._joins(call) for call in self.source.calls_in(function))
        return self.joining[key]

    def _entered_after_join(self, function: ast.AST) -> bool:
        key = id(function)
        if key not in self.entered:
            self.entered[key] = False  # recursion: the way in from outside decides
            assert isinstance(function, FUNCTIONS)
            sites = self.sites.get(self.source.function_key(function), [])
            self.entered[key] = any(not self.source.guarded(site) and self.after_join(site) for site in sites)
        return self.entered[key]

