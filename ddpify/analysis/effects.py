"""What a function of the project's own modules does when it is called, read from its source.

A call the script makes into one of its helper modules (`progress_bar(i, n, msg)`,
`utils.save_checkpoint(model, path)`) can be guarded to rank 0 only when the function does
nothing a rank must do itself: it prints (SPEAKS) or also writes files (WRITES), and
otherwise only computes from its arguments. Anything else - a model run, a collective, a
call ddpify does not know, a change to an object it was handed - makes it OPAQUE, and the
call stays on every rank as it was. The modules are read with `ast`, never rewritten.
"""
import ast
import builtins
from collections.abc import Iterator
from typing import Callable, Optional, Union, cast

import libcst as cst

from ddpify import ast_walk
from ddpify.analysis import forward_outputs, freezing, meters, names, part_runs, picked
from ddpify.analysis.ast_names import dotted_ast
from ddpify.analysis.facts import WHOLE_VALUE, Slot
from ddpify.analysis.returned_loaders import returned_loader_dict

PURE, SPEAKS, WRITES, OPAQUE = "pure", "speaks", "writes", "opaque"
# What a module (or a part of it) answers without running its forward: its methods that read
# or set it up, and the sizes of its tensors (`model.backbone.parameters()`, `w.numel()`).
_MODULE_READERS = names.NOT_FORWARD | {"register_forward_hook", "get_parameter", "numel", "size", "dim"}
# Opaque, and prints as well: its output appears once per rank (DDP311).
MIXED = "mixed"
_RANK = {PURE: 0, SPEAKS: 1, WRITES: 2}
# What a folder's name is read from when it differs between ranks (names_from_clock).
CLOCK = "the clock"
COUNTED_RUNS = "a count of the runs already there"

OUTPUT_CALLS = frozenset({
    "builtins.print", "sys.stdout.write", "sys.stdout.flush", "sys.stderr.write",
    "sys.stderr.flush", "pprint.pprint",
}) | names.PROGRESS_WRITE | names.SHOWN_ON_SCREEN
WRITE_CALLS = names.MAKE_DIRECTORIES | names.DUMP_TO_FILE | frozenset({
    names.TORCH_SAVE, "shutil.copy2", "shutil.move", "os.remove", "os.replace", "os.rename",
})
# Computations with no effect outside their result.
PURE_CALLS = frozenset(f"builtins.{name}" for name in (
    "len", "int", "float", "str", "bool", "round", "min", "max", "abs", "range", "enumerate",
    "zip", "format", "repr", "isinstance", "sum", "sorted", "list", "dict", "tuple", "set",
    "divmod", "hasattr", "getattr", "map", "filter", "any", "all", "reversed", "type",
)) | frozenset({
    "time.time", "time.perf_counter", "time.monotonic", "time.strftime", "time.localtime",
    "time.gmtime", "datetime.datetime.now", "datetime.timedelta", "shutil.get_terminal_size",
    "os.get_terminal_size", "os.getcwd", "json.dumps",
    # reading an image file
    "imageio.imread", "imageio.v2.imread", "imageio.v3.imread", "cv2.imread", "skimage.io.imread",
}) | frozenset(  # building an exception to raise: `raise ValueError(...)`
    f"builtins.{name}" for name in dir(builtins)
    if isinstance(getattr(builtins, name), type) and issubclass(getattr(builtins, name), BaseException))
# Libraries that cannot reach another rank or the model: image and array computations.
PURE_PREFIXES = ("math.", "os.path.", "datetime.", "string.", "numpy.", "PIL.", "torch.nn.functional.")
TENSOR_FUNCTIONS = frozenset(f"torch.{name}" for name in (
    "cat", "stack", "argmax", "argmin", "max", "min", "mean", "sum", "exp", "log", "sqrt",
    "abs", "clamp", "round", "softmax", "sigmoid", "tensor", "as_tensor", "zeros", "ones",
    "zeros_like", "ones_like", "arange", "linspace", "no_grad", "inference_mode", "isfinite",
    "isnan", "topk", "sort", "flatten", "where", "from_numpy",
))
# Calls that read a file: a helper that reads files as well as writing them (frames of the
# images rank 0 wrote, made into an animation) keeps its callers' guard (guards_itself).
FILE_READS = frozenset({
    "imageio.imread", "imageio.v2.imread", "imageio.v3.imread", "cv2.imread", "skimage.io.imread",
    "PIL.Image.open", "numpy.load", "numpy.loadtxt", "json.load", "pickle.load", "torch.load",
    "os.listdir", "glob.glob",
})
# Methods that read their object; on anything the function did not make itself, only these.
# Not `cpu`, `float`, `half`: on a model they move or convert it in place (a helper's
# `model.cpu()` on rank 0 alone would leave the ranks' models on different devices).
READING_METHODS = frozenset({
    "item", "tolist", "detach", "numpy", "mean", "sum", "max", "min", "argmax", "norm",
    "size", "dim", "numel", "int", "long", "keys", "values", "items", "get",
    "format", "join", "split", "strip", "rstrip", "lstrip", "ljust", "rjust", "center",
    "replace", "startswith", "endswith", "upper", "lower", "copy", "state_dict", "parameters",
    "named_parameters", "eq", "view", "reshape", "squeeze", "unsqueeze", "topk", "t",
    "expand_as", "isoformat", "strftime", "total_seconds", "count", "index",
    # Tensor and array methods that return a new value (in-place ones end in "_").
    "clone", "clamp", "transpose", "permute", "contiguous", "flatten", "astype", "mul", "add",
    "sub", "div", "abs", "round", "sqrt", "exp", "log", "softmax", "sigmoid", "std", "var",
    "any", "all", "shape", "type_as", "to_dense", "bool", "byte", "clip",
})
# Methods only a torch.nn.Module has (an optimizer has state_dict and zero_grad too).
MODULE_ONLY_METHODS = frozenset({"train", "eval", "parameters", "named_parameters", "modules", "children"})
# Methods that write a file, on an object the function made (a PIL image, a figure, a frame).
SAVING_METHODS = frozenset({"save", "savefig", "to_csv", "to_json", "to_parquet", "dump", "imwrite"})
LOG_METHODS = frozenset({"debug", "info", "warning", "warn", "error", "exception", "critical", "log"})
# Open modes that write.
_WRITING_MODES = set("wax+")

Resolve = Callable[[str], str]


class FunctionEffects:
    """The effect of each top-level function and each method ("Class.method") of one module,
    computed on demand."""

    def __init__(self, tree: ast.Module, package: str = "",
                 resolve_elsewhere: Optional[Resolve] = None) -> None:
        self._functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
        self.classes = [node.name for node in tree.body if isinstance(node, ast.ClassDef)]
        self._class_nodes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
        self._untrained: Optional[frozenset[str]] = None
        # evaluated_parameters per function: every call of it in every importing file asks.
        self._evaluated: dict[str, tuple[list[str], set[str]]] = {}
        self._class_of: dict[str, str] = {}
        self._tree = tree
        self._read_on_objects: Optional[frozenset[str]] = None
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                for method in node.body:
                    if isinstance(method, ast.FunctionDef):
                        self._functions[f"{node.name}.{method.name}"] = method
                        self._class_of[f"{node.name}.{method.name}"] = node.name
        self.imports = _import_table(tree, package)
        # `from .trainer import *` in a package's __init__: names found in those modules.
        self.star_modules = [module for node in tree.body if isinstance(node, ast.ImportFrom)
                             and any(alias.name == "*" for alias in node.names)
                             for module in [absolute_module(node, package)] if module is not None]
        # Each class's bases, as qualified names (`BaseTrainer` -> "base.BaseTrainer").
        self.bases = {node.name: [self.qualified(base) for base in map(dotted_ast, node.bases) if base]
                      for node in tree.body if isinstance(node, ast.ClassDef)}
        # Module-level `logger = logging.getLogger(...)`: its calls only log.
        self.loggers = {target.id for node in tree.body if isinstance(node, ast.Assign)
                        and isinstance(node.value, ast.Call)
                        and self.qualified(dotted_ast(node.value.func) or "") == names.GET_LOGGER
                        for target in node.targets if isinstance(target, ast.Name)}
        # Module-level `key2opt = {"sgd": SGD, ...}`: tables a function may return an entry of.
        self._module_dicts = {target.id: node.value for node in tree.body if isinstance(node, ast.Assign)
                              and isinstance(node.value, ast.Dict)
                              for target in node.targets if isinstance(target, ast.Name)}
        self._resolve_elsewhere = resolve_elsewhere
        self._tree = tree
        self._freezes: Optional[bool] = None
        self._known: dict[str, str] = {}
        self._guarding: dict[str, bool] = {}

    def freezes_parameters(self) -> bool:
        """The module sets requires_grad to a value that may be False (freezing.tree_freezes)."""
        if self._freezes is None:
            self._freezes = freezing.tree_freezes(self._tree)
        return self._freezes

    @property
    def tree(self) -> ast.Module:
        return self._tree

    @property
    def functions(self) -> list[str]:
        """Top-level functions and methods ("Class.method")."""
        return list(self._functions)

    def init_takes_module_first(self, class_name: str) -> Optional[bool]:
        """Whether the class's own `__init__` takes a module first, as DataParallel's does
        (`def __init__(self, module, ...)`, `def __init__(self, *args, **kwargs)`); None when
        the class defines none."""
        init = self._functions.get(f"{class_name}.__init__")
        if init is None:
            return None
        params = init.args.posonlyargs + init.args.args
        if len(params) >= 2:
            return params[1].arg == "module"
        return len(params) == 1 and init.args.vararg is not None

    def class_of(self, method: str) -> Optional[str]:
        return self._class_of.get(method)

    def of(self, name: str) -> str:
        """PURE, SPEAKS, WRITES, or OPAQUE; MIXED for an opaque function that also prints."""
        if name not in self._known:
            self._known[name] = OPAQUE  # a recursive call is not followed
            function = self._functions.get(name)
            self._known[name] = OPAQUE if function is None else _Reader(self, function, self.class_of(name)).effect()
            if self._known[name] == OPAQUE and function is not None and self._prints(function):
                self._known[name] = MIXED
        return self._known[name]

    def guards_itself(self, name: str) -> bool:
        """The function's prints and writes are each a statement that its module's own
        migration puts on rank 0 (DDP301, DDP302 there): a call statement (`print(...)`,
        `torch.save(...)`, `img.save(path)`), or inside a `with open(path, "w")` block. Not
        a log call (ranks' log levels are set where logging is configured), a write in a
        `return` or an assignment, nor a method of a dataset class (it runs in the loader's
        workers, left alone)."""
        if name not in self._guarding:
            self._guarding[name] = False  # a recursive call is not followed
            function = self._functions.get(name)
            owner = self.class_of(name)
            self._guarding[name] = function is not None and not (
                owner is not None and any(base.endswith("Dataset") for base in self.bases.get(owner, ()))) \
                and _Reader(self, function, owner).guarded(function.body)
        return self._guarding[name]

    def trains(self, name: str, depth: int = 0) -> bool:
        """The function takes training steps: it calls `.backward()`, itself or through a
        function of this module."""
        function = self._functions.get(name)
        if function is None or depth > 3:
            return False
        for node in ast_walk.walk(function):
            if isinstance(node, ast.Call):
                if isinstance(node.func, ast.Attribute) and node.func.attr == "backward":
                    return True
                callee = self.qualified(dotted_ast(node.func) or "")
                owner = self.class_of(name)
                if callee.startswith("self.") and callee.count(".") == 1 and owner is not None:
                    callee = f"{owner}.{callee[len('self.'):]}"  # `self._train_epoch(loader)`: a method of its class
                if callee in self._functions and callee != name and self.trains(callee, depth + 1):
                    return True
        return False

    def moved_parameters(self, name: str) -> tuple[list[str], set[str]]:
        """(the positional parameters, the ones the function moves to a device): `def
        __init__(self, model, device): self.model = model.to(device)` -> (["model", "device"],
        {"model"}); `kwargs["model"].to(...)` moves "model" too."""
        function = self._functions.get(name)
        if function is None:
            return [], set()
        positional = self._positional(name, function)
        keywords = {function.args.kwarg.arg} if function.args.kwarg is not None else set()
        # `self.G = generator` ... `self.G.cuda()`: a parameter kept on self and moved there.
        kept = {target.attr: node.value.id for node in ast_walk.statements(function) if isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Name) and node.value.id in positional
                for target in node.targets if isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name) and target.value.id == "self"}
        moved: set[str] = set()
        own = {id(node) for node in ast_walk.walk(function)}
        for node in self._nodes_moving_what_it_keeps(name, function):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("to", "cuda")):
                continue
            receiver = node.func.value
            if isinstance(receiver, ast.Attribute) and isinstance(receiver.value, ast.Name) and (
                    receiver.value.id == "self") and receiver.attr in kept:
                moved.add(kept[receiver.attr])
            elif id(node) not in own:
                continue  # another method's own names are not this function's parameters
            elif isinstance(receiver, ast.Name) and receiver.id in positional:
                moved.add(receiver.id)
            elif isinstance(receiver, ast.Subscript) and isinstance(receiver.value, ast.Name) and (
                    receiver.value.id in keywords) and isinstance(receiver.slice, ast.Constant):
                moved.add(str(receiver.slice.value))
        return positional, moved

    def handed_to_base_init(self, name: str) -> list[tuple[Optional[int], Optional[str], str]]:
        """For a class's `__init__`, the parameters it hands on to its base class's
        (`super(Trainer, self).__init__(model, config, train_loader)`, `super().__init__(model=model)`,
        `BaseTrainer.__init__(self, model, ...)`): (the base's position, or None, its keyword, or
        None, this function's parameter) for each argument that is one of its own parameters as
        it was handed in."""
        function = self._functions.get(name)
        if function is None or not name.endswith(".__init__"):
            return []
        own = set(self._positional(name, function)) | {a.arg for a in function.args.kwonlyargs}
        for node in ast_walk.walk(function):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "__init__"):
                continue
            receiver = node.func.value
            through_super = isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Name) \
                and receiver.func.id == "super"
            args = node.args if through_super else node.args[1:]
            if not through_super and not (node.args and isinstance(node.args[0], ast.Name)
                                          and node.args[0].id == "self"):
                continue
            handed: list[tuple[Optional[int], Optional[str], str]] = [
                (index, None, arg.id) for index, arg in enumerate(args)
                if isinstance(arg, ast.Name) and arg.id in own]
            handed += [(None, keyword.arg, keyword.value.id) for keyword in node.keywords
                       if keyword.arg is not None and isinstance(keyword.value, ast.Name) and keyword.value.id in own]
            return handed
        return []

    def _nodes_moving_what_it_keeps(self, name: str, function: ast.AST) -> Iterator[ast.AST]:
        """The nodes of `function`; for a class's `__init__`, those of every method of the class
        too: an object moves what it keeps later as well (`self.model = model` in `__init__`,
        `self.model.to(self.device)` in the `setup()` that `fit()` calls), and the caller's
        model then reaches its device inside the class, which wraps it there, after the move
        (a wrap by the caller, before the hand-off, would wrap a CPU module that the class
        moves and wraps again)."""
        yield from ast_walk.walk(function)
        owner, _, method = name.rpartition(".")
        if method != "__init__" or owner not in self.classes:
            return
        for key, other in self._functions.items():
            if self._class_of.get(key) == owner and other is not function:
                yield from ast_walk.walk(other)

    def element_moved_parameters(self, name: str) -> tuple[list[str], set[str]]:
        """(the positional parameters, the ones whose elements the function moves): `def
        to_device(nets, device): for net in nets: net.to(device)` -> {"nets"}; also
        `[net.cuda() for net in nets]`. The caller's `to_device([enc, dec], device)` moves
        enc and dec."""
        function = self._functions.get(name)
        if function is None:
            return [], set()
        positional = self._positional(name, function)
        moved: set[str] = set()
        loops: list[tuple[ast.expr, ast.expr, list[ast.AST]]] = []
        for node in ast_walk.walk(function):
            if isinstance(node, ast.For):
                loops.append((node.target, node.iter, list(node.body)))
            elif isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp)) and len(node.generators) == 1:
                loops.append((node.generators[0].target, node.generators[0].iter, [node.elt]))
        for target, iterated, body in loops:
            if not (isinstance(target, ast.Name) and isinstance(iterated, ast.Name) and iterated.id in positional):
                continue
            if any(isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                    "to", "cuda") and isinstance(node.func.value, ast.Name) and node.func.value.id == target.id
                   for part in body for node in ast_walk.walk(part)):
                moved.add(iterated.id)
        return positional, moved

    def state_loaded_parameters(self, name: str) -> tuple[list[str], set[str]]:
        """(the positional parameters, the ones the function, or the class's __init__, loads a
        state dict into: `def load_checkpoint(path, model, optimizer=None):
        model.load_state_dict(ckpt["model"])` -> {"model", "optimizer"} when it loads both),
        or reads the state dict of, never running it (`def __call__(self, model, epoch):
        torch.save(model.state_dict(), path)`, a Saver's): the raw module's keys, without
        DDP's `module.` prefix, are the checkpoint's. None when it trains: a training forward
        must go through the wrapper."""
        _, key, function = self._function_or_init(name)
        if function is None or self.trains(key):
            return [], set()
        return self._positional(key, function), self._state_read_parameters(key, function, 0)

    def _state_read_parameters(self, key: str, function: ast.FunctionDef, depth: int) -> set[str]:
        """The parameters whose state dict the function loads, or reads without running them,
        itself or through a method of its class it hands them to (`self._restart(shadow, live)`)."""
        arguments = function.args
        parameters = {a.arg for a in arguments.posonlyargs + arguments.args + arguments.kwonlyargs}
        calls = [node for node in ast_walk.walk(function) if isinstance(node, ast.Call)]
        # A model it runs, or keeps (`self.model = model`) or hands back, may train through
        # the wrapper later: only the wrapper will do there.
        run = {call.func.id for call in calls if isinstance(call.func, ast.Name)} | _kept_or_returned(function)
        loaded = {call.func.value.id for call in calls
                  if isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name)
                  and call.func.value.id in parameters and (
                      call.func.attr == "load_state_dict"
                      or call.func.attr == "state_dict" and call.func.value.id not in run)}
        owner = self.class_of(key)
        own = arguments.args[0].arg if owner is not None and arguments.args else None
        for call in calls:
            if depth >= 3 or own is None or not (isinstance(call.func, ast.Attribute) and isinstance(
                    call.func.value, ast.Name) and call.func.value.id == own):
                continue
            method_key = f"{owner}.{call.func.attr}"
            method = self._functions.get(method_key)
            if method is None or self.trains(method_key):
                continue
            inner = self._state_read_parameters(method_key, method, depth + 1)
            for position, parameter in enumerate(self._positional(method_key, method)):
                argument = call.args[position] if position < len(call.args) else None
                if parameter in inner and isinstance(argument, ast.Name) and argument.id in parameters:
                    loaded.add(argument.id)
        return loaded

    def grad_changed_parameters(self, name: str) -> tuple[list[str], dict[str, bool]]:
        """(the positional parameters, the parameters whose requires_grad the function changes,
        each with whether only part of it: `def set_trainable(module, flag): for p in
        module.parameters(): p.requires_grad = flag` -> {"module": False}, `def unfreeze(model):
        model.backbone.requires_grad_(True)` -> {"model": True}). A method's own object is
        "self": `def unfreeze_backbone(self): ...self.backbone...` -> {"self": True}. The same
        reading as for a function of the script itself (freezing.parameters_changed)."""
        function = self._functions.get(name)
        if function is None or not any(
                isinstance(node, ast.Attribute) and node.attr in ("requires_grad", "requires_grad_")
                for node in ast_walk.walk(function)):
            return [], {}
        definition = cst.parse_statement(ast.unparse(function))
        if not isinstance(definition, cst.FunctionDef):
            return [], {}
        return self._positional(name, function), freezing.parameters_changed(definition)

    def moves_own_model(self, name: str) -> bool:
        """The method moves a module it keeps on the object: `self.model = Net().to(device)`,
        `self.net.cuda()`."""
        function = self._functions.get(name)
        if function is None:
            return False
        for node in ast_walk.walk(function):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("to", "cuda"):
                receiver = node.func.value
                if isinstance(receiver, ast.Attribute) and isinstance(receiver.value, ast.Name) \
                        and receiver.value.id == "self":
                    return True
            if isinstance(node, ast.Assign) and _moved_in_chain(node.value) and any(
                    isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                    and target.value.id == "self" for target in node.targets):
                return True
        return False

    def moved_self_attributes(self) -> set[str]:
        """`X` for every `self.X` a method of a class here moves to a device (`self.model =
        model.to(device)`, `self.net.cuda()`): where a Trainer keeps the model it wraps."""
        found: set[str] = set()
        for key, function in self._functions.items():
            if key in self._class_of:
                found |= _self_attributes_moved_in(function)
        return found

    def tracker_attributes(self, class_name: str) -> set[str]:
        """`self.X` that a method of the class sets to a TensorBoard writer or Visdom client it
        makes (`self.writer = SummaryWriter(log_dir)` in a BaseTrainer's __init__):
        side_effects.py makes it on rank 0 only there, and the classes of other modules derived
        from it guard their uses of `self.X` (inherited_tracker_attributes)."""
        found: set[str] = set()
        for key, function in self._functions.items():
            if self._class_of.get(key) != class_name:
                continue
            local: list[ast.stmt] = [node for node in ast_walk.walk(function)
                                     if isinstance(node, (ast.Import, ast.ImportFrom))]
            table = {**self.imports, **_import_table(ast.Module(body=local, type_ignores=[]), "")}
            found.update(f"self.{node.targets[0].attr}" for node in ast_walk.statements(function)
                         if isinstance(node, ast.Assign) and len(node.targets) == 1
                         and isinstance(node.targets[0], ast.Attribute)
                         and isinstance(node.targets[0].value, ast.Name) and node.targets[0].value.id == "self"
                         and isinstance(node.value, ast.Call) and names.qualify(
                             dotted_ast(node.value.func) or "", table) in names.SUMMARY_WRITER | names.VISDOM)
        return found

    def attributes_read_on_objects(self) -> frozenset[str]:
        """`X` of every `obj.X` the module reads on something other than `self` (`trainer.writer
        .flush()` in a script): an attribute its class sets on rank 0 only would be missing there
        on the other ranks."""
        if self._read_on_objects is None:
            self._read_on_objects = frozenset(
                node.attr for node in ast.walk(self._tree) if isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Load)
                and not (isinstance(node.value, ast.Name) and node.value.id == "self"))
        return self._read_on_objects

    def returned_tracker(self, name: str) -> Optional[Slot]:
        """Where the function's result holds a TensorBoard writer or Visdom client it makes in
        the return itself (`return SummaryWriter(log_dir)`, `return log_dir, SummaryWriter(...)`)
        or in a local it returns (`writer = SummaryWriter(log_dir)` ... `return writer, log_dir`):
        side_effects.py makes it on rank 0 only there, and its callers guard what they hold at
        that place. None when it returns none, or not in the same place of every return."""
        function = self._functions.get(name)
        if function is None:
            return None
        # (Imported in the function too: `from torch.utils.tensorboard import SummaryWriter`
        # only when it logs.)
        local: list[ast.stmt] = [node for node in ast_walk.walk(function)
                                 if isinstance(node, (ast.Import, ast.ImportFrom))]
        table = {**self.imports, **_import_table(ast.Module(body=local, type_ignores=[]), "")}
        def makes_tracker(value: Optional[ast.expr]) -> bool:
            return isinstance(value, ast.Call) and names.qualify(
                dotted_ast(value.func) or "", table) in names.SUMMARY_WRITER | names.VISDOM

        # (Or held in a local first: `writer = SummaryWriter(log_dir)` ... `return writer`.)
        locals_made = {node.targets[0].id for node in ast_walk.statements(function) if isinstance(node, ast.Assign)
                       and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                       and makes_tracker(node.value)}
        def is_tracker(value: Optional[ast.expr]) -> bool:
            return makes_tracker(value) or isinstance(value, ast.Name) and value.id in locals_made

        slots: set[Slot] = set()
        for node in ast_walk.walk(function):
            if not isinstance(node, ast.Return):
                continue
            if is_tracker(node.value):
                slots.add(WHOLE_VALUE)
            elif isinstance(node.value, ast.Tuple) and not any(
                    isinstance(item, ast.Starred) for item in node.value.elts):
                items = node.value.elts
                slots.update((index, len(items)) for index, item in enumerate(items) if is_tracker(item))
                if not any(is_tracker(item) for item in items):
                    slots.add((-1, len(items)))  # a tuple without the writer: the same size, at least
            else:
                slots.add((-1, 0))
        if WHOLE_VALUE in slots:
            return WHOLE_VALUE
        found = {slot for slot in slots if slot[0] >= 0}
        return found.pop() if len(found) == 1 and len({slot[1] for slot in slots}) == 1 else None

    def returns_data_parallel(self, name: str) -> bool:
        """The function returns a model it wrapped in DataParallel, moved or not: `net =
        torch.nn.DataParallel(net).cuda(); return net`, `return model.cuda()` after `model =
        DataParallel(model)`, `return DataParallel(net)`."""
        function = self._functions.get(name)
        if function is None:
            return False
        returned, bound = _returned_and_bound(function)

        def wrapped(value: ast.expr, names_too: bool) -> bool:
            while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in (
                    "cuda", "to"):
                value = value.func.value
            if isinstance(value, ast.Name) and names_too:
                return any(wrapped(given, False) for given in bound.get(value.id, []))
            if not isinstance(value, ast.Call):
                return False
            qualified = self.qualified(dotted_ast(value.func) or "")
            return (qualified in names.DATA_PARALLEL
                    or qualified.rpartition(".")[2] in names.DATA_PARALLEL_SUBCLASS_NAMES)

        return any(wrapped(value, True) for value in returned)

    def moves_returned(self, name: str, depth: int = 0) -> bool:
        """The function returns what it moved to a device: `net = net.cuda(); return net`,
        `model.to(device)` then `return model`, or `return Net().to(device)`; or what a
        function of this module that does so returns (`return init_net(net, gpu_id)`, a
        factory that hands its network to a helper which moves and initialises it)."""
        if name in self.classes:
            init = self._functions.get(f"{name}.__init__")
            return init is not None and _moves_itself(init)
        function = self._functions.get(name)
        if function is None or depth > 3:
            return False

        def moves(value: ast.expr) -> bool:
            if _moves(value):
                return True
            if not isinstance(value, ast.Call):
                return False
            callee = self.qualified(dotted_ast(value.func) or "")
            return callee != name and callee in self._functions and self.moves_returned(callee, depth + 1)

        returned, bound = _returned_and_bound(function)
        moved = {target for target, values in bound.items() if any(moves(value) for value in values)}
        # (Modules move in place: `net.cuda()` alone moves `net`.)
        moved |= {node.func.value.id for node in ast_walk.walk(function) if isinstance(node, ast.Call)
                  and _moves(node) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)}
        # `return x.cuda() if torch.cuda.is_available() else x`: either branch may be taken.
        branches = [branch for value in returned for branch in (
            (value.body, value.orelse) if isinstance(value, ast.IfExp) else (value,))]
        return any(moves(value) or isinstance(value, ast.Name) and value.id in moved for value in branches)

    def optimizer_parameters(self, name: str) -> tuple[list[str], set[str]]:
        """The function's positional parameters, and those whose `.parameters()` (or
        `.named_parameters()`) an optimizer it builds trains, however the caller passes
        them: `set_optimizer(lr, model)` -> (["lr", "model"], {"model"})."""
        function = self._functions.get(name)
        if function is None or not self.builds_optimizer(name):
            return [], set()
        read = _parameters_read(function) | self._parameters_optimized(function)
        named = {a.arg for a in [*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs]}
        return self._positional(name, function), read & named

    def _parameters_optimized(self, function: ast.FunctionDef) -> set[str]:
        """The names a torch.optim optimizer the function builds is handed as its params
        (`optim.Adam(parameters, lr=...)` in `get_optimizer(config, parameters)`): the caller
        hands `model.parameters()` there, which names the model."""
        found: set[str] = set()
        for node in ast_walk.walk(function):
            if not isinstance(node, ast.Call):
                continue
            qualified = self.qualified(dotted_ast(node.func) or "")
            if not qualified.startswith(names.OPTIMIZER_PREFIX) or qualified.startswith(names.LR_SCHEDULER_PREFIX):
                continue
            params = [keyword.value for keyword in node.keywords if keyword.arg == "params"] or node.args[:1]
            found.update(value.id for value in params if isinstance(value, ast.Name))
        return found

    def kept_and_trained_parameters(self, name: str) -> tuple[list[str], dict[str, str]]:
        """For a class: (its __init__'s parameters, those it keeps as they were handed in,
        `self.model = model`, and builds an optimizer over, `SGD(self.model.parameters())`
        in any method, each with the attribute that keeps it: {"model": "model"}), when it
        moves none of them itself: the caller moves that model and wraps it there, before
        the hand-off (a class that moves it wraps it itself)."""
        init = self._functions.get(f"{name}.__init__")
        if name not in self.classes or init is None or not self.builds_optimizer(name):
            return [], {}
        positional, moved = self.moved_parameters(f"{name}.__init__")
        parameters = {a.arg for a in [*init.args.args[1:], *init.args.kwonlyargs]}
        kept = _kept_parameters(init, parameters)
        methods = [function for key, function in self._functions.items() if self._class_of.get(key) == name]
        optimized = {f"self.{node.func.value.attr}" for function in methods for node in ast_walk.walk(function)
                     if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                     and node.func.attr in ("parameters", "named_parameters")
                     and isinstance(node.func.value, ast.Attribute) and isinstance(node.func.value.value, ast.Name)
                     and node.func.value.value.id == "self"}
        if moved or self.moves_own_model(f"{name}.__init__"):
            return positional, {}
        return positional, {kept[attribute]: attribute[len("self."):] for attribute in optimized if attribute in kept}

    def optimizer_over_self(self, name: str) -> bool:
        """A method that builds an optimizer over its own object's parameters."""
        function = self._functions.get(name)
        if function is None or self.class_of(name) is None or not self.builds_optimizer(name):
            return False
        own = function.args.args[0].arg if function.args.args else "self"
        return own in _parameters_read(function)

    def callees(self, name: str) -> set[str]:
        """The full names of what the function, or any method of the class `name`, calls."""
        functions = [node for key, node in self._functions.items()
                     if key == name or self._class_of.get(key) == name]
        return {self.qualified(dotted) for function in functions for node in ast_walk.walk(function)
                if isinstance(node, ast.Call) and (dotted := dotted_ast(node.func)) is not None}

    def builds_optimizer(self, name: str) -> bool:
        """The function, or any method of the class `name`, builds a torch.optim optimizer:
        then it names the model it trains, and wraps it where it does."""
        functions = [node for key, node in self._functions.items()
                     if key == name or self._class_of.get(key) == name]
        return any(isinstance(node, ast.Call) and (self.qualified(dotted_ast(node.func) or "").startswith(
            names.OPTIMIZER_PREFIX) and not self.qualified(dotted_ast(node.func) or "").startswith(
            names.LR_SCHEDULER_PREFIX) or names.is_optimizer_class(self.qualified(dotted_ast(node.func) or "")))
            for function in functions for node in ast_walk.walk(function))

    def module_attributes(self, class_name: str) -> set[str]:
        """`self.X` that the class's methods use as a torch module (`self.model.train()`,
        `self.model.parameters()`): "self.model"."""
        found: set[str] = set()
        for key, function in self._functions.items():
            if self._class_of.get(key) != class_name:
                continue
            for node in ast_walk.walk(function):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                        node.func.attr in MODULE_ONLY_METHODS):
                    owner = dotted_ast(node.func.value)
                    if owner is not None and owner.startswith("self.") and owner.count(".") == 1:
                        found.add(owner)
        return found

    def optimized_self_attributes(self, class_name: str) -> set[str]:
        """`X` for every `self.X` whose parameters an optimizer that a method of the class
        builds trains (`optim.Adam(self.model.parameters(), lr=...)` in `_select_optimizer`):
        the model that class trains."""
        found: set[str] = set()
        for key, function in self._functions.items():
            if self._class_of.get(key) != class_name or not self.builds_optimizer(key):
                continue
            for node in ast_walk.walk(function):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                        and node.func.attr in ("parameters", "named_parameters"):
                    owner = dotted_ast(node.func.value)
                    if owner is not None and owner.startswith("self.") and owner.count(".") == 1:
                        found.add(owner[len("self."):])
        return found

    def own_moved_self_attributes(self, class_name: str) -> set[str]:
        """`X` for every `self.X` that a method of the class moves to a device (`self.model =
        self._build_model().to(self.device)` in its __init__)."""
        found: set[str] = set()
        for key, function in self._functions.items():
            if self._class_of.get(key) == class_name:
                found |= _self_attributes_moved_in(function)
        return found

    def self_attributes_read(self, class_name: str) -> set[str]:
        """`self.X` that the class's methods read (`self.writer.add_scalar(...)`)."""
        methods = [function for key, function in self._functions.items() if self._class_of.get(key) == class_name]
        return {f"self.{node.attr}" for function in methods for node in ast_walk.walk(function)
                if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load)
                and isinstance(node.value, ast.Name) and node.value.id == "self"}

    def attributes_from_parameters(self, class_name: str) -> set[str]:
        """`self.X` that the class's __init__ sets to one of its parameters, as it was handed
        in (`self.train_loader = train_loader`): "self.train_loader"."""
        function = self._functions.get(f"{class_name}.__init__")
        if function is None:
            return set()
        parameters = {arg.arg for arg in [*function.args.args[1:], *function.args.kwonlyargs]}
        return set(_kept_parameters(function, parameters))

    def forward_output_parts(self, class_name: str) -> forward_outputs.OutputParts:
        """For a class whose forward returns several outputs, the submodules each is
        computed from (analysis.forward_outputs)."""
        node = self._class_nodes.get(class_name)
        if node is None or f"{class_name}.forward" not in self._functions:
            return {}
        return forward_outputs.output_parts(
            node, forward_outputs.submodules(node, self.qualified, set(self.classes)))

    def lazy_layer(self, class_name: str) -> Optional[str]:
        """The first torch.nn lazy layer (`torch.nn.LazyLinear`) the class's __init__ builds:
        its parameters exist only after a first forward (rules/lazy_layers.py)."""
        init = self._functions.get(f"{class_name}.__init__")
        if init is None:
            return None
        for node in ast_walk.walk(init):
            if isinstance(node, ast.Call):
                qualified = self.qualified(dotted_ast(node.func) or "")
                if qualified.startswith("torch.nn.Lazy"):
                    return qualified
        return None

    def kept_copy(self, name: str) -> Optional[str]:
        """Where what `name(model)` returns keeps a deep copy of the module it is handed
        (rules/early_copies.py): "" for a function that returns `copy.deepcopy(...)` or for a
        Module class whose __init__ makes one, the attribute of a plain class (`shadow` for
        `self.shadow = copy.deepcopy(model)`); None for anything else."""
        function = self._functions.get(f"{name}.__init__" if name in self._class_nodes else name)
        if function is None:
            return None
        kept = [_bound_by(function, node) for node in ast_walk.walk(function) if isinstance(node, ast.Call)
                and self.qualified(dotted_ast(node.func) or "") == "copy.deepcopy"]
        if name not in self._class_nodes:
            returned = {dotted_ast(node.value) for node in ast_walk.walk(function)
                        if isinstance(node, ast.Return) and node.value is not None}
            return "" if returned and returned <= {name for name in kept if name is not None} else None
        attributes = [name[len("self."):] for name in kept if name is not None and name.startswith("self.")
                      and name.count(".") == 1]
        if not attributes:
            return None
        return "" if any(base.endswith("Module") for base in self.bases.get(name, ())) else attributes[0]

    def gradless_submodules(self, class_name: str) -> list[str]:
        """Submodules the class's __init__ builds (`self.resnet = nn.Sequential(...)`) that
        none of its methods reads with gradients: never read, or read only under
        `torch.no_grad()` (collector._record_unused_submodules does the same in the file)."""
        init = self._functions.get(f"{class_name}.__init__")
        if init is None or f"{class_name}.forward" not in self._functions:
            return []
        created = [target.attr for node in ast_walk.statements(init) if isinstance(node, ast.Assign)
                   and isinstance(node.value, ast.Call)
                   and self.qualified(dotted_ast(node.value.func) or "").startswith("torch.nn.")
                   and self.qualified(dotted_ast(node.value.func) or "") not in names.PARAMETERLESS_LAYERS
                   for target in node.targets
                   if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                   and target.value.id == "self"]
        created += self._copies_of(init, created)
        used: set[str] = set()
        for key, function in self._functions.items():
            if self._class_of.get(key) != class_name or self._decorated_without_grad(function):
                continue
            gradless = {id(inner) for node in ast_walk.statements(function) if isinstance(node, ast.With)
                        and self._without_grad(node) for inner in ast_walk.walk(node)}
            # `self.backbone(x).detach()`: the part's output is cut from the graph where it is made.
            gradless |= {id(node.func.value.func) for node in ast_walk.walk(function) if isinstance(node, ast.Call)
                         and isinstance(node.func, ast.Attribute) and node.func.attr in ("detach", "detach_")
                         and isinstance(node.func.value, ast.Call)}
            gradless |= {id(node.value.func) for node in ast_walk.walk(function) if isinstance(node, ast.Attribute)
                         and node.attr == "data" and isinstance(node.value, ast.Call)}
            gradless |= _detached_later(function)
            targets = {id(target) for node in ast_walk.statements(function) if isinstance(node, ast.Assign)
                       for target in node.targets}
            used |= {node.attr for node in ast_walk.walk(function) if isinstance(node, ast.Attribute)
                     and isinstance(node.value, ast.Name) and node.value.id == "self"
                     and id(node) not in gradless and id(node) not in targets}
        return [name for name in created if name not in used]

    def _copies_of(self, init: ast.AST, created: list[str]) -> list[str]:
        """`self.target = copy.deepcopy(self.online)`: an EMA or target copy of a submodule."""
        return [target.attr for node in ast_walk.walk(init) if isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Call) and node.value.args
                and self.qualified(dotted_ast(node.value.func) or "") in ("copy.deepcopy",
                                                                         "torch.optim.swa_utils.AveragedModel")
                and isinstance(node.value.args[0], ast.Attribute) and node.value.args[0].attr in created
                for target in node.targets
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                and target.value.id == "self"]

    def _decorated_without_grad(self, function: ast.AST) -> bool:
        """`@torch.no_grad()` on the method: nothing it reads gets a gradient."""
        decorators = getattr(function, "decorator_list", [])
        return any(self.qualified(dotted_ast(decorator.func if isinstance(decorator, ast.Call) else decorator) or "")
                   in ("torch.no_grad", "torch.inference_mode") for decorator in decorators)

    def _without_grad(self, node: ast.With) -> bool:
        for item in node.items:
            call = item.context_expr
            if not isinstance(call, ast.Call):
                continue
            qualified = self.qualified(dotted_ast(call.func) or "")
            if qualified in ("torch.no_grad", "torch.inference_mode"):
                return True
            if qualified == "torch.set_grad_enabled" and call.args and isinstance(call.args[0], ast.Constant) \
                    and call.args[0].value is False:
                return True
        return False

    def self_calls(self, name: str) -> set[str]:
        """The methods a method calls on its own object (`self._train_epoch(epoch)`)."""
        function = self._functions.get(name)
        if function is None or self.class_of(name) is None or not function.args.args:
            return set()
        own = function.args.args[0].arg
        return {node.func.attr for node in ast_walk.walk(function) if isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
                and node.func.value.id == own}

    def attribute_readers(self, name: str, wrapper_attributes: frozenset[str],
                          seen: frozenset[str] = frozenset()) -> set[int]:
        """Positions of the parameters whose own attributes the function reads
        (`model.pos_emb`), beyond what a DDP wrapper also has, itself or through a function of
        this module it hands them to as they are (`compute_loss(p, targets, model)` calling
        `build_targets(p, targets, model)`, which reads `model.yolo_layers`); none when it
        trains, since a training forward must go through the wrapper."""
        function = self._functions.get(name)
        if function is None or self.trains(name) or name in seen:
            return set()
        read = _attributes_read(function, wrapper_attributes)
        for call in ast_walk.walk(function):
            if isinstance(call, ast.Call) and self._module_function(call):
                readers = self.attribute_readers(cast(ast.Name, call.func).id, wrapper_attributes, seen | {name})
                read |= {arg.id for index, arg in enumerate(call.args)
                         if index in readers and isinstance(arg, ast.Name)}
        return {index for index, parameter in enumerate(self._positional(name, function)) if parameter in read}

    def attribute_only_readers(self, name: str, wrapper_attributes: frozenset[str],
                               seen: frozenset[str] = frozenset()) -> set[int]:
        """Positions of the parameters the function only reads attributes of (`model.yolo_layers`,
        beyond what a DDP wrapper has), itself or through functions of this module it hands
        them to as they are: never calling one (no forward, which the wrapper must take, or its
        gradients would not be shared) nor handing it to anything else. For a function whose
        effect ddpify cannot tell (a loss function that builds its targets from the model's
        layers), the raw module is then what it needs, and all it gets."""
        function = self._functions.get(name)
        if function is None or self.trains(name) or name in seen:
            return set()
        positional = self._positional(name, function)
        read = _attributes_read(function, wrapper_attributes)
        other_uses: set[str] = set()
        for call in ast_walk.walk(function):
            if not isinstance(call, ast.Call):
                continue
            # `model(x)`, `model.head(x)`, `model.heads[0](x)`: a forward of it or of a part of
            # it, which would bypass the wrapper (its gradients not shared).
            root = call.func
            while isinstance(root, (ast.Attribute, ast.Subscript)):
                root = root.value
            reads_only = isinstance(call.func, ast.Attribute) and call.func.attr in _MODULE_READERS
            if isinstance(root, ast.Name) and not reads_only:
                other_uses.add(root.id)
            handed = {index: arg.id for index, arg in enumerate(call.args) if isinstance(arg, ast.Name)}
            handed_by_keyword = {keyword.value.id for keyword in call.keywords if isinstance(keyword.value, ast.Name)}
            other_uses |= handed_by_keyword
            if not handed:
                continue
            local = self._module_function(call)
            inspecting = isinstance(call.func, ast.Name) and call.func.id in ("isinstance", "hasattr", "getattr",
                                                                               "len", "type", "id")
            readers = self.attribute_only_readers(cast(ast.Name, call.func).id, wrapper_attributes,
                                                  seen | {name}) if local else set()
            for index, handed_name in handed.items():
                if local and index in readers:
                    read.add(handed_name)
                elif not inspecting:
                    other_uses.add(handed_name)
        return {index for index, parameter in enumerate(positional) if parameter in read - other_uses}

    def untrained_parts(self) -> frozenset[str]:
        """What the classes of this module keep that trains nothing (part_runs.frozen_parts)."""
        if self._untrained is None:
            self._untrained = part_runs.frozen_parts(ast.Module(body=list(self._class_nodes.values()), type_ignores=[]))
        return self._untrained

    def parameters_run_in_part(self, name: str, frozen: frozenset[str] = frozenset(),
                               seen: frozenset[str] = frozenset()) -> tuple[list[str], dict[str, tuple[int, str]]]:
        """Its positional parameters, and those a part of which it runs with gradients on
        (analysis/part_runs.py: `compute_loss(outputs, targets, model)` running
        `model.heads[0](x)`), itself or through a function of this module it hands them to as
        they are: each with the line and the function of the first such run. Parts (and
        methods) named in `frozen` train nothing and do not count."""
        function = self._functions.get(name)
        if function is None or name in seen:
            return [], {}
        positional = self._positional(name, function)
        parameters = [*positional, *(argument.arg for argument in function.args.kwonlyargs)]
        found: dict[str, tuple[int, str]] = {}
        for parameter in parameters:
            runs = part_runs.part_runs(function, parameter, frozen)
            if runs:
                found[parameter] = (runs[0].lineno, ast.unparse(runs[0].func))
        for call in ast_walk.walk(function):
            if isinstance(call, ast.Call) and self._module_function(call):
                inner_positional, inner = self.parameters_run_in_part(cast(ast.Name, call.func).id, frozen,
                                                                      seen | {name})
                for index, arg in enumerate(call.args[:len(inner_positional)]):
                    if isinstance(arg, ast.Name) and arg.id in parameters and inner_positional[index] in inner:
                        found.setdefault(arg.id, inner[inner_positional[index]])
        return positional, found

    def _module_function(self, call: ast.Call) -> bool:
        """`build_targets(p, targets, model)`: a call of a function (not a method) of this module."""
        return isinstance(call.func, ast.Name) and call.func.id in self._functions \
            and self.class_of(call.func.id) is None

    def picked_from_own_batches(self, name: str) -> set[Optional[int]]:
        """For a function that trains: where its return holds a value picked from its own
        batches (picked.py; None for the whole value, k for a tuple's k-th element)."""
        function = self._functions.get(name)
        if function is None or not self.trains(name):
            return set()
        return picked.picked_positions(function)

    def _positional(self, name: str, function: ast.FunctionDef) -> list[str]:
        """The positional parameters a caller passes: a method's object is not one of them."""
        positional = [a.arg for a in function.args.posonlyargs + function.args.args]
        return positional[1:] if self.class_of(name) is not None else positional

    def running_mean_kind(self, name: str) -> Optional[str]:
        """For a class whose update() keeps a sum and a count, how its average follows
        (meters.ASSIGNED or DERIVED); None for anything else."""
        if name not in self.classes:
            return None
        return meters.running_mean_kind(self._functions.get(f"{name}.update"), self._functions.get(f"{name}.avg"))

    def returns_python_numbers(self, name: str) -> bool:
        """The function (not a method) returns a Python int or float on every return, never
        a tensor (`return correct.item() * 100.0 / batch_size`): what a running meter's
        update() or a sum across ranks can carry, as figures._python_number reads it in the
        module itself."""
        function = self._functions.get(name)
        if function is None or self.class_of(name) is not None:
            return False
        returns = [node for node in ast_walk.statements(function) if isinstance(node, ast.Return)]
        bound: dict[str, list[ast.expr]] = {}
        for node in ast_walk.walk(function):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                bound.setdefault(node.targets[0].id, []).append(node.value)
        return bool(returns) and all(node.value is not None and _python_number(node.value, bound)
                                     for node in returns)

    def returns_loader(self, name: str) -> bool:
        """The function returns a DataLoader it builds, alone or in a tuple."""
        function = self._functions.get(name)
        if function is None:
            return False
        returned, bound = _returned_and_bound(function)
        return any(self._builds_loader(value) or isinstance(value, ast.Name) and self._bound_to_loader(
            value.id, bound) for value in returned)

    def _bound_to_loader(self, name: str, bound: dict[str, list[ast.expr]]) -> bool:
        """`name` is given a DataLoader the function builds: directly, or, when every value
        it is given is a name given one (`if types == "train": dl = train_loader` / `else:
        dl = dev_loader`), through those names, one step."""
        values = bound.get(name, [])
        if any(self._builds_loader(made) for made in values):
            return True
        return bool(values) and all(isinstance(made, ast.Name) and made.id != name and any(
            self._builds_loader(each) for each in bound.get(made.id, ())) for made in values)

    def loader_attributes(self, class_name: str) -> frozenset[str]:
        """Rule: the attributes a method of the class sets to a DataLoader it builds
        (`self.train = DataLoader(train_set, shuffle=True)` in a data holder's __init__):
        `for batch in dataset.train` then goes over a loader this module shards."""
        found: set[str] = set()
        for name, function in self._functions.items():
            if self.class_of(name) != class_name:
                continue
            for node in ast_walk.walk(function):
                if isinstance(node, ast.Assign) and self._builds_loader(node.value):
                    found.update(target.attr for target in node.targets if isinstance(target, ast.Attribute)
                                 and isinstance(target.value, ast.Name) and target.value.id == "self")
        return frozenset(found)

    def draws_from_own_loaders(self, name: str) -> bool:
        """Rule: a method that takes batches with next() (`get_batch(self)`: `next(self.iterators[i])`,
        restarted on StopIteration) of a class whose methods build DataLoaders: what it hands
        out is a batch of a loader this module builds (and shards), not one made by hand."""
        function = self._functions.get(name)
        owner = self.class_of(name)
        if function is None or owner is None or not any(
                isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "next"
                for node in ast_walk.walk(function)):
            return False
        return any(self.class_of(other) == owner and any(
            isinstance(node, ast.Call) and self._builds_loader(node) for node in ast_walk.walk(method))
            for other, method in self._functions.items())

    def hands_out_own_parameters(self, name: str) -> bool:
        """Rule: a method of a class that yields or returns what it reads from `.parameters()`
        or `.named_parameters()` (DeepLab's `get_1x_lr_params(self)`, `optim_parameters(self,
        args)`): `SGD([{"params": model.get_1x_lr_params()}, ...])` trains the object."""
        function = self._functions.get(name)
        if function is None or self.class_of(name) is None:
            return False
        reads = any(isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("parameters", "named_parameters") for node in ast_walk.walk(function))
        returned = [node for node in ast_walk.statements(function)
                    if isinstance(node, ast.Return) and node.value is not None]
        return reads and (_yields(function) or bool(returned))

    def returns_optimizer_class(self, name: str) -> bool:
        """Rule: every return of the function is a class of torch.optim, not an optimizer
        (semseg's `get_optimizer(cfg)`: `return SGD`, `return key2opt[name]` of a module-level
        dict of them, `return getattr(torch.optim, name)`): its caller builds the optimizer
        by calling what it returns."""
        function = self._functions.get(name)
        if function is None:
            return False
        returned = [node.value for node in ast_walk.statements(function) if isinstance(node, ast.Return)]
        return bool(returned) and all(value is not None and self._optimizer_class(value) for value in returned)

    def _optimizer_class(self, value: ast.expr) -> bool:
        if isinstance(value, ast.IfExp):
            return self._optimizer_class(value.body) and self._optimizer_class(value.orelse)
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "getattr" \
                and value.args:
            return names.is_optimizer_module(self.qualified(dotted_ast(value.args[0]) or ""))
        if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name):
            table = self._module_dicts.get(value.value.id)
            return table is not None and bool(table.values) and all(
                entry is not None and self._optimizer_class(entry) for entry in table.values)
        dotted = dotted_ast(value)
        return dotted is not None and names.is_optimizer_class(self.qualified(dotted))

    def hands_out_batches(self, name: str) -> bool:
        """What calling `name` gives is certainly no DataLoader but batches the project makes
        by hand: `name` is a generator function (it yields), a class with no base but
        `object` that defines `__iter__` or `__next__` (a batch iterator of its own), or a
        function that returns only such objects (`return DatasetIterater(data, bs)`)."""
        if name in self.classes:
            return self._iterator_class(name)
        function = self._functions.get(name)
        if function is None:
            return False
        if _yields(function):
            return True
        returned, bound = _returned_and_bound(function)
        # (A returned name counts by every value the function gives it: none is a parameter.)
        made = [bound.get(value.id, []) if isinstance(value, ast.Name) else [value] for value in returned]
        return bool(made) and all(values and all(
            isinstance(value, ast.Call) and self._iterator_class(dotted_ast(value.func) or "")
            for value in values) for values in made)

    def writes_files(self, name: str, depth: int = 0) -> bool:
        """The function writes a file (torch.save, an open for writing, json.dump and the
        like), itself or through a function of this module or a method it calls on its own
        object (`fit` calling `self.save_checkpoint(path)`): a call of it, which trains on
        every rank while its writes run on rank 0 alone, is followed by reads that must wait."""
        function = self._functions.get(name)
        if function is None or depth > 3:
            return False
        owner = self.class_of(name)
        own = function.args.args[0].arg if owner is not None and function.args.args else None
        for node in ast_walk.walk(function):
            if not isinstance(node, ast.Call):
                continue
            qualified = self.qualified(dotted_ast(node.func) or "")
            if qualified == names.TORCH_SAVE or qualified in names.DUMP_TO_FILE or (
                    qualified in names.OPEN and _opens_for_writing(node)):
                return True
            if isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) \
                    and node.func.value.id == own:
                qualified = f"{owner}.{node.func.attr}"
            if qualified != name and qualified in self._functions and self.writes_files(qualified, depth + 1):
                return True
        return False

    def downloads(self, name: str, depth: int = 0) -> bool:
        """The function (the class's __init__) downloads or unpacks data (`download=True`,
        urlretrieve, an archive opened), itself or through a function of this module: ddpify
        puts barriers there that ask at run time whether the process group exists, so a call
        of it must come after the setup (before it, every rank downloads at once)."""
        _, key, function = self._function_or_init(name)
        if function is None or depth > 3:
            return False
        for node in ast_walk.walk(function):
            if not isinstance(node, ast.Call):
                continue
            qualified = self.qualified(dotted_ast(node.func) or "")
            if qualified in names.FETCH_OR_UNPACK or any(
                    keyword.arg == "download" and not (isinstance(keyword.value, ast.Constant)
                                                       and keyword.value.value in (False, None))
                    for keyword in node.keywords):
                return True
            if qualified != key and qualified in self._functions and self.downloads(qualified, depth + 1):
                return True
        return self._writes_what_it_fetches(function)

    def _writes_what_it_fetches(self, function: ast.AST) -> bool:
        """It reads from the network and opens a file for writing (names.NETWORK_READS)."""
        calls = [node for node in ast_walk.walk(function) if isinstance(node, ast.Call)]
        return any(self.qualified(dotted_ast(call.func) or "") in names.NETWORK_READS for call in calls) and any(
            self.qualified(dotted_ast(call.func) or "") in names.OPEN and _opens_for_writing(call) for call in calls)

    def loads_checkpoint(self, name: str) -> bool:
        """The function, or the class's __init__, reads a file with torch.load itself."""
        _, _, function = self._function_or_init(name)
        return function is not None and any(
            isinstance(node, ast.Call) and self.qualified(dotted_ast(node.func) or "") == names.TORCH_LOAD
            for node in ast_walk.walk(function))

    def names_from_clock(self, name: str) -> Optional[tuple[int, str]]:
        """The line where the function (the class's __init__) itself assigns a name or path
        built from the clock or a random draw (`args.log_dir = os.path.join(args.log_dir,
        "in-progress_" + datetime.now().strftime("%m%d%H%M%S"))`): a clock or chance call
        (names.CLOCK_OR_CHANCE) in an expression that also holds a string (a folder's name,
        a strftime format); a bare `start = time.time()` for timings does not count. With the
        line, what the name is read from (CLOCK, COUNTED_RUNS). So too
        a run numbered by counting the runs already there (`run_id = len(glob.glob(
        f"{root}/{name}-*"))`): each rank counts at its own moment, and a rank that counts after
        rank 0 made this run's folder names the next one."""
        _, _, function = self._function_or_init(name)
        if function is None:
            return None
        for node in ast_walk.walk(function):
            if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
                continue
            inner = list(ast_walk.walk(node.value))
            counted = any(isinstance(each, ast.Call) and self._counts_a_listing(each) for each in inner)
            timed = any(isinstance(each, ast.Call) and self.qualified(dotted_ast(each.func) or "")
                        in names.CLOCK_OR_CHANCE for each in inner)
            if (counted or timed) and any(isinstance(each, ast.JoinedStr) or isinstance(
                    each, ast.Constant) and isinstance(each.value, str) for each in inner):
                return node.lineno, COUNTED_RUNS if counted else CLOCK
        return None

    def _counts_a_listing(self, call: ast.Call) -> bool:
        """`len(glob.glob(...))`, `len(os.listdir(root))`: how many entries a folder holds now."""
        return (isinstance(call.func, ast.Name) and call.func.id == "len" and len(call.args) == 1
                and isinstance(call.args[0], ast.Call)
                and self.qualified(dotted_ast(call.args[0].func) or "") in names.FOLDER_LISTINGS)

    def iterated_parameters(self, name: str) -> tuple[list[str], set[str]]:
        """(the positional parameters, those whose value a `for` loop iterates) of a function,
        or of a class's __init__ whose `self.X = parameter` a method's loop iterates (`for x,
        y in self.train_iter`); through one name between (`loader = self.tr_loader if train
        else self.cv_loader`)."""
        owner, key, function = self._function_or_init(name)
        if function is None:
            return [], set()
        positional = self._positional(key, function)
        parameters = set(positional) | {arg.arg for arg in function.args.kwonlyargs}
        held = _kept_parameters(function, parameters) if owner is not None else {}
        return positional, {held.get(found, found) for found in self._iterated_reads(function, owner)} & parameters

    def evaluated_parameters(self, name: str, depth: int = 0) -> tuple[list[str], set[str]]:
        """(the positional parameters, those a `for` loop goes over without a training step and
        keeps per rank) of a plain function of this module that takes none, itself or through
        the functions of this module it hands the parameter to (`evaluate_model(model,
        train_loader, ...)` calling `calc_loss_loader(train_loader, model, device,
        num_batches=eval_iter)`): a loader handed in there is evaluated over, whatever loader the
        caller hands. A loop this module's own migration reads through evaluation_share and
        gathers is not one: it runs a model it is handed (`model(inputs)`) and goes over the
        whole loader (no `break`, islice or zip with a range, which keep it per rank)."""
        if depth == 0 and name in self._evaluated:
            return self._evaluated[name]
        function = self._functions.get(name)
        if function is None or self.class_of(name) is not None or depth > 3 or self.trains(name):
            return [], set()
        positional = self._positional(name, function)
        parameters = set(positional) | {arg.arg for arg in function.args.kwonlyargs}
        evaluated = {found for loop in ast_walk.walk(function) if isinstance(loop, ast.For)
                     and not _gathered_where_migrated(loop, parameters)
                     for found in _dotted_reads(loop.iter) & parameters}
        for call in ast_walk.walk(function):
            if not isinstance(call, ast.Call):
                continue
            callee = self.qualified(dotted_ast(call.func) or "")
            if callee == name or callee not in self._functions:
                continue
            inner_positional, inner = self.evaluated_parameters(callee, depth + 1)
            handed = [*zip(inner_positional, call.args), *((k.arg, k.value) for k in call.keywords)]
            evaluated |= {value.id for parameter, value in handed
                          if parameter in inner and isinstance(value, ast.Name) and value.id in parameters}
        if depth == 0:
            self._evaluated[name] = (positional, evaluated)
        return positional, evaluated

    def walked_parameters(self, name: str) -> tuple[list[str], set[str]]:
        """(the positional parameters, those whose parameters or submodules the function walks:
        `for n, p in model.named_parameters()`) of a function, not a class: what it returns
        from that walk (`get_params_groups(model, weight_decay)`'s groups) is that module's."""
        owner, key, function = self._function_or_init(name)
        if function is None or owner is not None:
            return [], set()
        positional = self._positional(key, function)
        walked = {node.func.value.id for node in ast_walk.walk(function) if isinstance(node, ast.Call)
                  and isinstance(node.func, ast.Attribute) and node.func.attr in freezing.MODULE_WALKS
                  and isinstance(node.func.value, ast.Name)}
        return positional, walked & set(positional)

    def iterated_entries(self, name: str) -> tuple[list[str], set[tuple[str, str]]]:
        """(the positional parameters, the (parameter, key) pairs whose entry a `for` loop
        iterates) of a function or of a class's __init__: `self.tr_loader = data["tr_loader"]`
        in `Solver.__init__(self, data, ...)`, then `for batch in self.tr_loader` (or through
        one name between) in a method iterates the `"tr_loader"` entry of the dict handed in
        at `data`. Only string keys count."""
        owner, key, function = self._function_or_init(name)
        if function is None:
            return [], set()
        positional = self._positional(key, function)
        parameters = set(positional) | {arg.arg for arg in function.args.kwonlyargs}
        held: dict[str, tuple[str, str]] = {}  # "self.tr_loader" -> ("data", "tr_loader")
        for node in ast_walk.walk(function):
            if not isinstance(node, ast.Assign):
                continue
            value = node.value
            if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name) \
                    and value.value.id in parameters and isinstance(value.slice, ast.Constant) \
                    and isinstance(value.slice.value, str):
                for target in node.targets:
                    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                            and target.value.id == "self" and owner is not None:
                        held[f"self.{target.attr}"] = (value.value.id, value.slice.value)
                    elif isinstance(target, ast.Name):
                        held[target.id] = (value.value.id, value.slice.value)
        entries = {held[found] for found in self._iterated_reads(function, owner) if found in held}
        if owner is None:  # `for x, y in loaders["train"]:` right in the function
            entries |= {(loop.iter.value.id, loop.iter.slice.value) for loop in ast_walk.walk(function)
                        if isinstance(loop, (ast.For, ast.AsyncFor)) and isinstance(loop.iter, ast.Subscript)
                        and isinstance(loop.iter.value, ast.Name) and loop.iter.value.id in parameters
                        and isinstance(loop.iter.slice, ast.Constant) and isinstance(loop.iter.slice.value, str)}
        return positional, entries

    def _function_or_init(self, name: str) -> tuple[Optional[str], str, Optional[ast.FunctionDef]]:
        """What calling `name` runs: (the class when `name` is one, the key of the function
        or of the class's __init__, its definition or None)."""
        owner = name if name in self.classes else None
        key = f"{name}.__init__" if owner is not None else name
        return owner, key, self._functions.get(key)

    def _iterated_reads(self, function: ast.FunctionDef, owner: Optional[str]) -> set[str]:
        """The names and `self.X` attributes that `for` loops of the function (of every method
        of the class `owner`) iterate, through one name between."""
        bodies = [function] if owner is None else [
            method for key_, method in self._functions.items() if self._class_of.get(key_) == owner]
        iterated: set[str] = set()
        for body in bodies:
            _, bound = _returned_and_bound(body)
            for loop in ast_walk.walk(body):
                if not isinstance(loop, (ast.For, ast.AsyncFor)):
                    continue
                read = _dotted_reads(loop.iter)
                for local in list(read):
                    read |= {found for value in bound.get(local, ()) for found in _dotted_reads(value)}
                iterated |= read
        return iterated

    def loader_subclass(self, name: str) -> Optional[bool]:
        """For a class of this module derived directly from torch's DataLoader: whether its
        __init__ forwards `sampler=` (takes **kwargs or a sampler parameter); None otherwise."""
        if name not in self.classes or not any(base in names.DATALOADER_ALIASES for base in self.bases.get(name, ())):
            return None
        init = self._functions.get(f"{name}.__init__")
        if init is None:
            return True
        return init.args.kwarg is not None or any(
            arg.arg == "sampler" for arg in [*init.args.args, *init.args.kwonlyargs])

    def batch_sampler_by_rank(self, name: str) -> bool:
        """A class of this module that shards by rank itself and is told the epoch: a method
        of it asks torch.distributed for the rank or the world size (`dist.get_rank()`), and it
        has `set_epoch`. A batch sampler of that kind is kept as it is under DDP (data.py)."""
        if name not in self.classes or f"{name}.set_epoch" not in self._functions:
            return False
        methods = [function for key, function in self._functions.items() if key.startswith(name + ".")]
        asked = {self.qualified(dotted_ast(node.func) or "") for method in methods for node in ast_walk.walk(method)
                 if isinstance(node, ast.Call)}
        return bool(asked & {"torch.distributed.get_rank", "torch.distributed.get_world_size"})

    def _iterator_class(self, name: str) -> bool:
        plain = all(base in ("object", "builtins.object") for base in self.bases.get(name, ()))
        return name in self.classes and plain and any(
            f"{name}.{method}" in self._functions for method in ("__iter__", "__next__"))

    def returned_loader_dict(self, name: str) -> Optional[dict[str, bool]]:
        """The function returns a dict of DataLoaders it builds: key -> whether its own
        module's migration shards the entry (returned_loaders.py)."""
        function = self._functions.get(name)
        return None if function is None else returned_loader_dict(function, self._builds_loader)

    def _builds_loader(self, value: ast.expr) -> bool:
        return isinstance(value, ast.Call) and self.qualified(dotted_ast(value.func) or "") in names.DATALOADER_ALIASES

    def _prints(self, function: ast.FunctionDef) -> bool:
        for node in ast_walk.walk(function):
            if isinstance(node, ast.Call):
                qualified = self.qualified(dotted_ast(node.func) or "")
                if qualified in OUTPUT_CALLS or qualified in self._functions and self.of(qualified) in (
                        SPEAKS, MIXED):
                    return True
        return False

    def qualified(self, dotted: str) -> str:
        return names.qualify(dotted, self.imports)

    def of_call(self, qualified: str) -> str:
        """The effect of a call by its qualified name, made from inside this module."""
        if qualified in self._functions:
            return self.of(qualified)
        if qualified in OUTPUT_CALLS or qualified.startswith("matplotlib.pyplot."):
            return WRITES if qualified in WRITE_CALLS else SPEAKS
        if qualified in WRITE_CALLS:
            return WRITES
        if qualified in PURE_CALLS or qualified in TENSOR_FUNCTIONS or qualified.startswith(PURE_PREFIXES):
            return PURE
        if qualified.startswith("logging."):
            return SPEAKS
        if self._resolve_elsewhere is not None:
            return self._resolve_elsewhere(qualified)
        return OPAQUE




def _self_attributes_moved_in(function: ast.FunctionDef) -> set[str]:
    """`X` for every `self.X` the method moves to a device (`self.model = model.to(device)`,
    `self.net.cuda()`)."""
    found: set[str] = set()
    for node in ast_walk.walk(function):
        moved: list[ast.expr] = []
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("to", "cuda"):
            moved.append(node.func.value)
        if isinstance(node, ast.Assign) and _moved_in_chain(node.value):
            moved.extend(node.targets)
        found.update(target.attr for target in moved if isinstance(target, ast.Attribute)
                     and isinstance(target.value, ast.Name) and target.value.id == "self")
    return found


def _parameters_read(function: ast.FunctionDef) -> set[str]:
    """The names whose `.parameters()` or `.named_parameters()` the function reads."""
    return {node.func.value.id for node in ast_walk.walk(function) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute) and node.func.attr in ("parameters", "named_parameters")
            and isinstance(node.func.value, ast.Name)}


def strongest(effects: list[str]) -> str:
    if OPAQUE in effects or MIXED in effects:
        return OPAQUE
    return max(effects, key=_RANK.__getitem__, default=PURE)


# Statements not followed: nested definitions, imports, async code, `match` (Python 3.10+).
_UNREAD_STATEMENTS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom,
                      ast.AsyncFor, ast.AsyncWith) + tuple(
    getattr(ast, name) for name in ("Match", "TryStar") if hasattr(ast, name))


class _Reader:
    """One function's statements, read for the strongest effect they have."""

    def __init__(self, module: FunctionEffects, function: ast.FunctionDef,
                 owner: Optional[str] = None) -> None:
        self.module = module
        self.function = function
        arguments = function.args
        # In a method, `self.other()` is the class's own method; `self.x = ...` changes the
        # object, which makes the method opaque (`meter.update(v)` runs on every rank).
        positional = arguments.posonlyargs + arguments.args
        self.owner = owner
        self.self_name = positional[0].arg if owner is not None and positional else None
        self.parameters = {a.arg for a in arguments.posonlyargs + arguments.args + arguments.kwonlyargs}
        self.parameters |= {a.arg for a in (arguments.vararg, arguments.kwarg) if a is not None}
        self.made_here = _names_made_in(function) - self.parameters
        self.declared_global = {name for node in ast_walk.walk(function) if isinstance(node, ast.Global)
                                for name in node.names}

    def effect(self) -> str:
        if self.function.decorator_list:
            return OPAQUE
        return strongest([self._statement(statement) for statement in self.function.body])

    def _statement(self, statement: ast.stmt) -> str:
        if isinstance(statement, _UNREAD_STATEMENTS):
            return OPAQUE
        if any(isinstance(node, (ast.Yield, ast.YieldFrom, ast.Await, ast.NamedExpr))
               for node in ast_walk.walk(statement) if not isinstance(node, ast.Lambda)):
            return OPAQUE
        if isinstance(statement, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            if not all(self._own_target(target) for target in targets):
                return OPAQUE
        if isinstance(statement, ast.Delete) and not all(self._own_target(t) for t in statement.targets):
            return OPAQUE
        if isinstance(statement, (ast.For, ast.With)) and not self._own_loop_or_with_target(statement):
            return OPAQUE
        effects = [self._call(call) for call in _calls_in(statement)]
        for block in _blocks_of(statement):
            effects += [self._statement(inner) for inner in block]
        return strongest(effects)

    def guarded(self, statements: list[ast.stmt], in_written_file: bool = False) -> bool:
        """Every print or write of the statements is one the module's migration guards
        (FunctionEffects.guards_itself); `in_written_file`: inside `with open(path, "w")`."""
        for statement in statements:
            opens_to_write = isinstance(statement, ast.With) and any(
                isinstance(item.context_expr, ast.Call) and _opens_for_writing(item.context_expr)
                for item in statement.items)
            inside = in_written_file or opens_to_write
            for call in _calls_in(statement):
                if self._reads_file(call):
                    return False
                if self._call(call) in (SPEAKS, WRITES) and not inside and not self._guarded_call(statement, call):
                    return False
            if not all(self.guarded(block, inside) for block in _blocks_of(statement)):
                return False
        return True

    def _reads_file(self, call: ast.Call) -> bool:
        """Reads a file on every rank once the call's guard is gone, maybe one rank 0 writes."""
        qualified = self.module.qualified(dotted_ast(call.func) or "")
        if qualified == "builtins.open":
            return not _opens_for_writing(call)
        return qualified in FILE_READS

    def _guarded_call(self, statement: ast.stmt, call: ast.Call) -> bool:
        """A call statement of its own, not a log call; one of this module's functions or
        methods guards inside it (its migration leaves the call itself unguarded)."""
        if isinstance(statement, ast.Return) and statement.value is call and statement is self.function.body[-1]:
            # `return torch.save(state, path)` ending the function: guarded there, its value None
            # on the other ranks as on rank 0 (side_effects._guard_returned_write).
            return self.module.qualified(dotted_ast(call.func) or "") in names.WRITERS_RETURNING_NONE
        if not (isinstance(statement, ast.Expr) and statement.value is call):
            return False
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr in LOG_METHODS and _base_name(func) in self.module.loggers:
            return False
        if (self.self_name is not None and isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                and func.value.id == self.self_name and f"{self.owner}.{func.attr}" in self.module.functions):
            return self.module.guards_itself(f"{self.owner}.{func.attr}")
        qualified = self.module.qualified(dotted_ast(func) or "")
        if qualified.startswith("logging."):
            return False
        return self.module.guards_itself(qualified) if qualified in self.module.functions else True

    def _own_target(self, target: ast.expr) -> bool:
        """An assignment to a name (a local, or a global the function declares), or into an
        object the function made itself."""
        if isinstance(target, ast.Name):
            return True
        if isinstance(target, (ast.Tuple, ast.List)):
            return all(self._own_target(element) for element in target.elts)
        if isinstance(target, ast.Starred):
            return self._own_target(target.value)
        if isinstance(target, (ast.Attribute, ast.Subscript)):
            base = _base_name(target)
            return base is not None and base in self.made_here and base not in self.declared_global
        return False

    def _own_loop_or_with_target(self, statement: Union[ast.For, ast.With]) -> bool:
        targets = [statement.target] if isinstance(statement, ast.For) else [
            item.optional_vars for item in statement.items if item.optional_vars is not None]
        return all(self._own_target(target) for target in targets)

    def _call(self, call: ast.Call) -> str:
        if isinstance(call.func, ast.Attribute) and call.func.attr in names.PATH_WRITING_METHODS:
            return WRITES  # `Path(out_dir, "config.json").write_text(...)`, `(run / "DONE").touch()`
        return self._other_call(call)

    def _other_call(self, call: ast.Call) -> str:
        dotted = dotted_ast(call.func)
        if (self.self_name is not None and isinstance(call.func, ast.Attribute)
                and isinstance(call.func.value, ast.Name) and call.func.value.id == self.self_name
                and f"{self.owner}.{call.func.attr}" in self.module.functions):
            return self.module.of(f"{self.owner}.{call.func.attr}")
        if isinstance(call.func, ast.Attribute):
            base = _base_name(call.func)
            if base is not None and base in self.made_here and base not in self.declared_global:
                # A method of something this function made: a list it fills, a file it opened,
                # an image it saves.
                if call.func.attr in ("write", "writelines", "writerow", "writerows"):
                    return WRITES if base in self._opened_for_writing() else PURE
                return WRITES if call.func.attr in SAVING_METHODS else PURE
            if base in self.module.loggers and call.func.attr in LOG_METHODS:
                return SPEAKS
            if call.func.attr.endswith("_") and not call.func.attr.startswith("_"):
                return OPAQUE  # in place (`x.detach().add_(1)` changes what it was handed)
            if self._fresh(call.func.value):
                # `Image.fromarray(a).save(path)`: a value just made by a library call.
                return WRITES if call.func.attr in SAVING_METHODS else PURE
            if dotted is None or (base is not None and base not in self.module.imports):
                return PURE if call.func.attr in READING_METHODS else OPAQUE
        if dotted is None:
            return OPAQUE
        qualified = self.module.qualified(dotted)
        if qualified == "builtins.open":
            return WRITES if _opens_for_writing(call) else PURE
        if isinstance(call.func, ast.Name) and call.func.id in self.parameters | self.made_here:
            return OPAQUE  # a callable it was handed (the model, a callback)
        return self.module.of_call(qualified)

    def _fresh(self, value: ast.expr) -> bool:
        """A new object from a library that cannot reach the model or another rank (an
        array, an image, a tensor), or from a reading method."""
        if not isinstance(value, ast.Call):
            return False
        if isinstance(value.func, ast.Attribute) and value.func.attr in READING_METHODS:
            return True
        dotted = dotted_ast(value.func)
        if dotted is None or dotted in self.module.functions:
            return False
        qualified = self.module.qualified(dotted)
        return qualified in PURE_CALLS or qualified in TENSOR_FUNCTIONS or qualified.startswith(PURE_PREFIXES)

    def _opened_for_writing(self) -> set[str]:
        opened: set[str] = set()
        for node in ast_walk.walk(self.function):
            if isinstance(node, ast.With):
                for item in node.items:
                    if (isinstance(item.context_expr, ast.Call) and isinstance(item.optional_vars, ast.Name)
                            and _opens_for_writing(item.context_expr)):
                        opened.add(item.optional_vars.id)
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and dotted_ast(
                    node.value.func) in ("csv.writer", "csv.DictWriter", "open"):
                opened |= {target.id for target in node.targets if isinstance(target, ast.Name)}
        return opened


def _opens_for_writing(call: ast.Call) -> bool:
    mode: Optional[ast.expr] = call.args[1] if len(call.args) > 1 else None
    for keyword in call.keywords:
        if keyword.arg == "mode":
            mode = keyword.value
    if mode is None:
        return False
    if isinstance(mode, ast.Constant) and isinstance(mode.value, str):
        return bool(set(mode.value) & _WRITING_MODES)
    return True  # a mode ddpify cannot read: take it as a write


def _calls_in(statement: ast.stmt) -> Iterator[ast.Call]:
    """The calls of the statement itself, not of the blocks it holds."""
    for expression in _own_expressions(statement):
        for node in ast_walk.walk(expression):
            if isinstance(node, ast.Call):
                yield node


def _own_expressions(statement: ast.stmt) -> list[ast.AST]:
    blocks = {id(inner) for block in _blocks_of(statement) for inner in block}
    found: list[ast.AST] = []
    for field in ast_walk.child_nodes(statement):
        if id(field) not in blocks and not isinstance(field, (ast.stmt, ast.excepthandler)):
            found.append(field)
    if isinstance(statement, ast.Try):
        found += [handler.type for handler in statement.handlers if handler.type is not None]
    return found


def _blocks_of(statement: ast.stmt) -> list[list[ast.stmt]]:
    blocks = [getattr(statement, name) for name in ("body", "orelse", "finalbody")
              if isinstance(getattr(statement, name, None), list)]
    if isinstance(statement, ast.Try):
        blocks += [handler.body for handler in statement.handlers]
    return blocks


def _names_made_in(function: ast.FunctionDef) -> set[str]:
    """Names the function binds to a value it creates (not to one it was handed)."""
    made: set[str] = set()
    for node in ast_walk.walk(function):
        if isinstance(node, ast.Assign) and not isinstance(node.value, (ast.Name, ast.Attribute, ast.Subscript)):
            for target in node.targets:
                made |= _bound_names(target)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and isinstance(node.target, ast.Name):
            made.add(node.target.id)
        elif isinstance(node, ast.With):
            made |= {name for item in node.items if item.optional_vars is not None
                     for name in _bound_names(item.optional_vars)}
        elif isinstance(node, ast.comprehension):
            made |= _bound_names(node.target)
    return made


def _bound_names(target: ast.expr) -> set[str]:
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return {name for element in target.elts for name in _bound_names(element)}
    if isinstance(target, ast.Starred):
        return _bound_names(target.value)
    return set()


def _base_name(node: ast.expr) -> Optional[str]:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _moved_in_chain(value: ast.expr) -> bool:
    """`Net().to(device)`, `Net().to(device).train()`, `Net().cuda().eval()`."""
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in (
            "to", "cuda", "train", "eval", "float", "double", "half", "bfloat16"):
        if value.func.attr in ("to", "cuda"):
            return True
        value = value.func.value
    return False


def _import_table(tree: ast.Module, package: str) -> dict[str, str]:
    """What each imported name of the module stands for (`np` -> "numpy"; in package `utils`,
    `from .misc import bar` -> "utils.misc.bar"): imports at module level, also inside a
    `try:` / `if` there (`try: import imageio except ImportError: imageio = None`)."""
    table: dict[str, str] = {}
    for node in _module_level_statements(tree.body):
        if isinstance(node, ast.Import):
            for alias in node.names:
                names.add_import(table, alias.name, alias.asname)
        elif isinstance(node, ast.ImportFrom):
            module = absolute_module(node, package)
            for alias in node.names:
                if module is not None and alias.name != "*":
                    names.add_import_from(table, module, alias.name, alias.asname)
                elif module is not None:
                    names.add_star_import(table, module)
    return table


def _module_level_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements that run when the module is imported, through try and if blocks (not
    into functions or classes)."""
    for statement in body:
        yield statement
        if isinstance(statement, ast.Try):
            blocks = [statement.body, *(handler.body for handler in statement.handlers), statement.orelse,
                      statement.finalbody]
        elif isinstance(statement, ast.If):
            blocks = [statement.body, statement.orelse]
        else:
            continue
        for block in blocks:
            yield from _module_level_statements(block)


def absolute_module(node: ast.ImportFrom, package: str) -> Optional[str]:
    """The module a `from ... import` reads, with relative imports made absolute."""
    if not node.level:
        return node.module
    parts = package.split(".") if package else []
    if node.level - 1 > len(parts) or not package:
        return None
    base = parts[: len(parts) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else [])) or None


def _kept_or_returned(function: ast.FunctionDef) -> set[str]:
    """The names the function stores as they are (`self.model = model`, `kept = [a, b]`),
    returns, or hands to `append`."""
    found: set[str] = set()
    for node in ast_walk.walk(function):
        values: list[Optional[ast.expr]] = []
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.Return)):
            values.append(node.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                "append", "extend", "insert", "add"):
            values.extend(node.args)
        for value in values:
            elements = value.elts if isinstance(value, (ast.Tuple, ast.List)) else [value]
            found.update(element.id for element in elements if isinstance(element, ast.Name))
    return found


def _moves(value: ast.expr) -> bool:
    """`x.to(...)` or `x.cuda(...)`, the outermost call of the value."""
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in ("to", "cuda")


def _moves_itself(init: ast.FunctionDef) -> bool:
    """An `__init__` that moves its object, or its parts one by one, in place (`self.to(device)`,
    `self.encoder.cuda()`) or as it stores them (`self.backbone = backbone.to(device)`): each
    object of the class is made on its device, as by `Net().to(device)` (the reading of
    devices.moves_itself for a class of another module)."""
    receiver = init.args.args[0].arg if init.args.args else "self"
    for node in ast_walk.walk(init):
        if isinstance(node, ast.Expr) and _moves(node.value):
            moved = cast(ast.Attribute, cast(ast.Call, node.value).func).value
            while isinstance(moved, ast.Attribute):
                moved = moved.value
            if isinstance(moved, ast.Name) and moved.id == receiver:
                return True
        if isinstance(node, ast.Assign) and _moves(node.value) and any(
                isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == receiver
                for target in node.targets):
            return True
    return False


def _kept_parameters(function: ast.FunctionDef, parameters: set[str]) -> dict[str, str]:
    """`self.X = parameter` in the function, as it was handed in: "self.X" -> the parameter;
    also pairwise, `self.model, self.loader = model, loader`."""
    kept: dict[str, str] = {}
    for node in ast_walk.walk(function):
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            pairs = [(target, node.value)]
            if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple) \
                    and len(target.elts) == len(node.value.elts):
                pairs = list(zip(target.elts, node.value.elts))
            for held, value in pairs:
                if isinstance(value, ast.Name) and value.id in parameters and isinstance(held, ast.Attribute) \
                        and isinstance(held.value, ast.Name) and held.value.id == "self":
                    kept[f"self.{held.attr}"] = value.id
    return kept


def _gathered_where_migrated(loop: ast.For, parameters: set[str]) -> bool:
    """The loop calls a parameter (the model handed in) and goes over its whole loader: the
    module's migration takes this rank's share and gathers its figures (rules/evaluation.py)."""
    capped = any(isinstance(node, ast.Break) for node in ast_walk.walk(loop)) or any(
        isinstance(node, ast.Call) and (dotted_ast(node.func) or "").rsplit(".", 1)[-1] in ("islice", "zip")
        for node in ast_walk.walk(loop.iter))
    return not capped and any(isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                              and node.func.id in parameters for node in ast_walk.walk(loop))


def _dotted_reads(node: ast.expr) -> set[str]:
    """The names and `self.X` attributes an expression reads."""
    found: set[str] = set()
    for inner in ast_walk.walk(node):
        if isinstance(inner, ast.Name):
            found.add(inner.id)
        elif isinstance(inner, ast.Attribute) and isinstance(inner.value, ast.Name) and inner.value.id == "self":
            found.add(f"self.{inner.attr}")
    return found


def _yields(function: ast.FunctionDef) -> bool:
    """The function's own body yields (not a function or lambda nested in it)."""
    pending: list[ast.AST] = list(function.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return True
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            pending.extend(ast_walk.child_nodes(node))
    return False


_SCALAR_METHODS = frozenset({"item", "size", "numel", "dim", "nelement"})
_SCALAR_FUNCTIONS = frozenset({"len", "int", "float", "round"})


def _python_number(value: ast.expr, bound: dict[str, list[ast.expr]], depth: int = 0) -> bool:
    """A Python int or float, not a tensor: `x.item() * 100.0 / n`, `len(y)`, `2`, a name
    the function gives only such values."""
    if isinstance(value, ast.Constant):
        return isinstance(value.value, (int, float)) and not isinstance(value.value, bool)
    if isinstance(value, ast.BinOp):
        return _python_number(value.left, bound, depth) and _python_number(value.right, bound, depth)
    if isinstance(value, ast.UnaryOp):
        return _python_number(value.operand, bound, depth)
    if isinstance(value, ast.Call):
        if isinstance(value.func, ast.Attribute):
            return value.func.attr in _SCALAR_METHODS
        return isinstance(value.func, ast.Name) and value.func.id in _SCALAR_FUNCTIONS
    if isinstance(value, ast.Subscript):
        return isinstance(value.value, ast.Attribute) and value.value.attr == "shape"
    if isinstance(value, ast.Name) and depth < 3:
        values = bound.get(value.id, [])
        return bool(values) and all(_python_number(each, bound, depth + 1) for each in values)
    return False


def _returned_and_bound(function: ast.AST) -> tuple[list[ast.expr], dict[str, list[ast.expr]]]:
    """What the function returns (each element of a returned tuple) and, per plain name it
    assigns, the values it is given."""
    returned: list[ast.expr] = []
    bound: dict[str, list[ast.expr]] = {}
    for node in ast_walk.walk(function):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    bound.setdefault(target.id, []).append(node.value)
        elif isinstance(node, ast.Return) and node.value is not None:
            returned.extend(node.value.elts if isinstance(node.value, ast.Tuple) else [node.value])
    return returned, bound


def _detached_later(function: Union[ast.FunctionDef, ast.AsyncFunctionDef]) -> set[int]:
    """The ids of the `self.X` read in `h = self.backbone(x)` when the next statement of the
    block that mentions `h` cuts it from the graph (`h = h.detach()`, `h = h.data`,
    `h.detach_()`): collector._detached_later's rule, for a class of another module."""
    cut: set[int] = set()
    for node in ast_walk.walk(function):
        for block in (getattr(node, field, None) for field in ("body", "orelse", "finalbody")):
            if not isinstance(block, list):
                continue
            for position, statement in enumerate(block):
                if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1
                        and isinstance(statement.targets[0], ast.Name) and isinstance(statement.value, ast.Call)):
                    continue
                name = statement.targets[0].id
                following = next((later for later in block[position + 1:] if any(
                    isinstance(inner, ast.Name) and inner.id == name for inner in ast_walk.walk(later))), None)
                if following is not None and _cuts_name(following, name):
                    cut |= {id(inner) for inner in ast_walk.walk(statement.value) if isinstance(inner, ast.Attribute)
                            and isinstance(inner.value, ast.Name) and inner.value.id == "self"}
    return cut


def _cuts_name(statement: ast.stmt, name: str) -> bool:
    """`name = name.detach()` (`.data`, a chain on it) or `name.detach_()`."""
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1 \
            and isinstance(statement.targets[0], ast.Name) and statement.targets[0].id == name:
        value: ast.expr = statement.value
    elif isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call) \
            and isinstance(statement.value.func, ast.Attribute) and statement.value.func.attr == "detach_":
        value = statement.value
    else:
        return False
    reads = [inner for inner in ast_walk.walk(value) if isinstance(inner, ast.Name) and inner.id == name]
    receivers = {id(inner.value) for inner in ast_walk.walk(value)
                 if isinstance(inner, ast.Attribute) and inner.attr in ("detach", "detach_", "data")}
    return bool(reads) and all(id(read) in receivers for read in reads)


def _attributes_read(function: ast.AST, wrapper_attributes: frozenset[str]) -> set[str]:
    """The names whose own attributes `function` reads (`model.yolo_layers`), beyond those a
    DDP wrapper also has."""
    return {node.value.id for node in ast_walk.walk(function) if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name) and node.attr not in wrapper_attributes}


def _bound_by(function: ast.FunctionDef, call: ast.Call) -> Optional[str]:
    """The single name `name = call` binds in `function` (methods chained on the call, such as
    `.eval()`, included)."""
    for node in ast_walk.walk(function):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            value: ast.expr = node.value
            while isinstance(value, ast.Call) and value is not call and isinstance(value.func, ast.Attribute):
                value = value.func.value
            if value is call:
                return dotted_ast(node.targets[0])
    return None
