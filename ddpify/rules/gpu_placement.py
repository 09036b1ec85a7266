"""A script that never chooses a device is placed on this rank's GPU where ddpify can be certain
(DDP016, DDP017, DDP130); elsewhere it stays on CPU ranks and DDP011 names the line that stops it.

Rule (DESIGN.md §2 items 8-10): before the migration, a script with no device, no `.cuda()` and
no `.to(...)` gets the common device choice after its imports (this rank's GPU once the setup
has run, else the CPU, so plain `python` on a CPU-only machine runs as before), `name.to(device)`
after each construction of a module the training loops call (the model, a loss with weights, a
frozen encoder: each statement of the user's is kept, so each construction path is moved, and
the wrap ddpify adds after the move follows it on every path), every batch a DataLoader pass
yields moved right after it is drawn (`non_blocking` only where that loader pins memory), and
`.cpu()` before each `.numpy()`. The migration then runs on that script as on any script with a
device choice. ddpify places nothing when a tensor the model meets might stay on the CPU: a
tensor factory without `device=` in a loop over a loader, a function it calls or a method of the
model (an RNN's `torch.zeros(1, n, hidden)`), a plain tensor attribute, a tensor made outside and
read inside, a module whose value ddpify cannot see built, a model called outside a loader pass,
a batch it cannot take apart, or a batch value handed to numpy, matplotlib or sklearn. That line
is then DDP011's, with the fix. The self-check DDP949 reads the output again for such factories.
"""
import ast
import builtins
import io
import re
import tokenize
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Optional, TypeVar, Union

from ddpify.analysis import batch_parts
from ddpify.analysis.ast_names import dotted_ast
from ddpify.diagnostics import Diagnostic, Rule, Severity
from ddpify.rules.cases import TRAINING, Emits, Silent

RULES = (
    Rule("DDP016", Severity.EDIT, "the script chose no device: each rank trains on its own GPU, else the CPU",
         "The script never names a device, so it would run on the CPU in every process torchrun "
         "starts, leaving the GPUs idle. ddpify found every tensor the model meets (each batch of "
         "each loader pass, the modules the loops call) and moved it to the device of the usual "
         "choice, which the setup makes this rank's GPU; on a machine without a GPU it is the CPU.",
         "Nothing to do."),
    Rule("DDP017", Severity.EDIT, "`.cpu()` before `.numpy()` of a tensor the migration placed on the GPU",
         "numpy cannot read GPU memory: `.numpy()` of a CUDA tensor raises. `.cpu()` returns the same "
         "tensor when it is already on the CPU, so plain `python` on a CPU-only machine is unchanged.",
         "Nothing to do."),
    Rule("DDP130", Severity.EDIT, "module moved to the device where it is built, before any wrap",
         "A module the training loops call (the model, a loss holding class weights, a frozen encoder "
         "or an EMA copy) must sit where the batches are; the model is then wrapped after its move.",
         "Nothing to do."),
)

# The shared training case without its device choice and its moves: a script that never names a device.
_NO_DEVICE = TRAINING.replace('device = torch.device("cuda" if torch.cuda.is_available() else "cpu")\n', "") \
    .replace(".to(device)", "")

CASES = (
    Emits(_NO_DEVICE, "DDP016", ('device = torch.device("cuda", local_rank)', "x, y = x.to(device), y.to(device)")),
    Emits(_NO_DEVICE, "DDP130", ("model.to(device)\nif distributed:\n    model = DDP(model, device_ids=",)),
    Emits(_NO_DEVICE.replace("print(epoch, loss.item())", "print(epoch, y.numpy().sum())"), "DDP017",
          ("y.cpu().numpy()",)),
    Silent(TRAINING, "DDP016"),
)

DEVICE_CHOICE = 'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")'

# Things the script says that mean it chooses placements itself: then nothing is placed.
_CHOOSES_A_DEVICE = re.compile(r"\bdevice\b|cuda|\.to\(|\bmps\b|accelerator|\bxla\b|set_default")

FACTORIES = frozenset({
    "zeros", "ones", "empty", "full", "rand", "randn", "randint", "randperm", "arange", "range", "linspace",
    "logspace", "eye", "tensor", "as_tensor", "from_numpy", "Tensor", "FloatTensor", "LongTensor", "IntTensor",
    "BoolTensor", "DoubleTensor", "ByteTensor", "HalfTensor", "sparse_coo_tensor", "normal", "tril_indices",
    "triu_indices",
})  # (`multinomial(probs)` and `bernoulli(p)` draw on their input's device)
# Where a factory's tensor becomes part of the module (a parameter or a buffer) and moves with it.
_KEEPERS = ("Parameter", "register_buffer", "register_parameter")
_Scope = TypeVar("_Scope", ast.FunctionDef, ast.ClassDef)
# Modules of torch.nn that hold no tensor when built from constants: nothing to move.
_STATELESS = frozenset({"ReLU", "ReLU6", "LeakyReLU", "GELU", "SiLU", "ELU", "Sigmoid", "Tanh", "Softmax",
                        "LogSoftmax", "Dropout", "Flatten", "Identity", "Softplus", "Mish"})
# Libraries that read a tensor's memory on the host.
_HOST_READERS = ("numpy", "matplotlib", "sklearn", "scipy", "pandas", "PIL", "seaborn")
# Calls and attributes that read a value without computing with it on its device.
_LOOKERS = frozenset({"print", "len", "str", "repr", "isinstance",
                      "format", "type"})
_COLLECTORS = frozenset({"append", "extend", "write", "format", "add", "update", "info", "debug"})
_MEASURES = frozenset({"size", "shape", "__len__"})
_ITERATION_WRAPPERS = ("enumerate", "tqdm", "tqdm.tqdm", "tqdm.auto.tqdm", "iter")
_SAFE_NAMES = frozenset(dir(builtins))
# Displays that hold values without registering them on a module.
_DISPLAYS = (ast.List, ast.ListComp, ast.Tuple, ast.Dict, ast.DictComp)
# Methods of a module that compute nothing on the inputs they are handed.
_BOOKKEEPING = frozenset({
    "parameters", "named_parameters", "buffers", "named_buffers", "children", "named_children", "modules",
    "named_modules", "state_dict", "load_state_dict", "train", "eval", "zero_grad", "requires_grad_", "apply",
    "to", "cpu", "float", "double", "half", "register_forward_hook", "register_forward_pre_hook",
    "register_full_backward_hook", "register_buffer", "register_parameter", "add_module", "extra_repr",
})


@dataclass
class Placed:
    """The placed source, its lines' lines in the original, and what was done."""
    code: str
    original_line: list[int]
    notes: list[Diagnostic] = field(default_factory=list)

    def to_original(self, line: int) -> int:
        return self.original_line[line - 1] if 0 < line <= len(self.original_line) else line


@dataclass
class Uncertain:
    """Why ddpify keeps the script on the CPU: the first line that stops the placement."""
    line: int
    reason: str


class _Stop(Exception):
    def __init__(self, node: ast.AST, reason: str) -> None:
        super().__init__(reason)
        self.line, self.reason = getattr(node, "lineno", 1), reason


def _without_comments(code: str) -> str:
    """The code with its comments blanked (`# no need to call .to(device)` chooses nothing)."""
    lines = code.splitlines(keepends=True)
    try:
        for token in tokenize.generate_tokens(io.StringIO(code).readline):
            if token.type == tokenize.COMMENT:
                row, column = token.start
                line = lines[row - 1]
                lines[row - 1] = line[:column] + " " * (token.end[1] - column) + line[token.end[1]:]
    except (tokenize.TokenError, IndentationError):
        return code
    return "".join(lines)


def place(code: str, tree: ast.Module, local_modules: frozenset[str] = frozenset()) -> Union[Placed, Uncertain]:
    """The script placed on the device, or why not (the first line that stops it).
    `local_modules`: the project's own modules the script imports, whose code ddpify does not
    read for placement: what of theirs meets the batches stops it."""
    uncommented = _without_comments(code)
    named = _CHOOSES_A_DEVICE.search(uncommented)
    if named is not None:
        return Uncertain(uncommented.count("\n", 0, named.start()) + 1,
                         f"the script names devices itself (`{named.group()}`), and ddpify keeps its choice")
    try:
        return _Placement(code, tree, local_modules).run()
    except _Stop as stop:
        return Uncertain(stop.line, stop.reason)


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    parents = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    return parents


def _keyword(call: ast.Call, name: str) -> Optional[ast.expr]:
    return next((k.value for k in call.keywords if k.arg == name), None)


class _Placement:
    def __init__(self, code: str, tree: ast.Module, local_modules: frozenset[str]) -> None:
        self.code, self.tree, self.local_modules = code, tree, local_modules
        self.lines = code.splitlines(keepends=True)
        self.parents = _parents(tree)
        self.torch = {a.asname or a.name for s in tree.body if isinstance(s, ast.Import) for a in s.names
                      if a.name == "torch"}
        self.imported = self._imported_names()
        self.functions = {s.name: s for s in tree.body if isinstance(s, ast.FunctionDef)}
        self.module_classes = self._module_classes()
        # 0-based line index -> the lines inserted before it, each with the original line it stands for
        self.inserts: dict[int, list[tuple[str, int]]] = {}
        self.cpu_at: set[tuple[int, int]] = set()  # (line, byte column) where `.cpu()` goes
        self.notes: list[tuple[str, int, str]] = []
        self.moved_modules: dict[ast.stmt, str] = {}
        self.batch_parts = batch_parts.BatchParts(tree, self._full_name)

    # -- facts -----------------------------------------------------------------------------------
    def _imported_names(self) -> dict[str, str]:
        found = {}
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    found[alias.asname or alias.name.split(".")[0]] = alias.name
            elif isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    found[alias.asname or alias.name] = f"{node.module or ''}.{alias.name}"
        return found

    def _module_classes(self) -> dict[str, ast.ClassDef]:
        classes = {s.name: s for s in self.tree.body if isinstance(s, ast.ClassDef)}
        found: dict[str, ast.ClassDef] = {}
        for _ in range(3):
            for name, node in classes.items():
                bases = [dotted_ast(base) or "" for base in node.bases]
                if any(base.endswith("Module") or base.rpartition(".")[2] in found for base in bases):
                    found[name] = node
        return found

    def _full_name(self, expr: ast.expr) -> str:
        dotted = dotted_ast(expr) or ""
        head, _, rest = dotted.partition(".")
        if head in self.imported:
            return self.imported[head] + ("." + rest if rest else "")
        return dotted

    def _is_factory(self, call: ast.Call) -> bool:
        name = self._full_name(call.func)
        return name.startswith("torch.") and name.count(".") == 1 and name.split(".")[1] in FACTORIES \
            and _keyword(call, "device") is None

    def _function_of(self, node: ast.AST) -> Optional[ast.FunctionDef]:
        return self._enclosing(node, ast.FunctionDef)

    def _class_of(self, node: ast.AST) -> Optional[ast.ClassDef]:
        return self._enclosing(node, ast.ClassDef)

    def _enclosing(self, node: ast.AST, kind: type[_Scope]) -> Optional[_Scope]:
        parent = self.parents.get(node)
        while parent is not None and not isinstance(parent, kind):
            parent = self.parents.get(parent)
        return parent

    def _bindings(self, name: str, scope: Optional[ast.FunctionDef]) -> list[ast.stmt]:
        """Statements of `scope` (or of the module's top level, outside functions) that bind `name`."""
        body: Iterable[ast.AST] = ast.walk(scope) if scope is not None else self._top_level_nodes()
        found: list[ast.stmt] = []
        for node in body:
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.With)) \
                    and self._function_of(node) is scope and name in self._bound_names(node):
                found.append(node)
        return found

    def _top_level_nodes(self) -> Iterator[ast.AST]:
        pending: list[ast.AST] = list(self.tree.body)
        while pending:
            node = pending.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                continue
            yield node
            pending.extend(ast.iter_child_nodes(node))

    @staticmethod
    def _bound_names(node: ast.AST) -> set[str]:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.For)):
            targets = [node.target]
        elif isinstance(node, ast.With):
            targets = [item.optional_vars for item in node.items if item.optional_vars is not None]
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}

    def _resolve(self, name: str, scope: Optional[ast.FunctionDef]) -> tuple[Optional[ast.FunctionDef], list]:
        """The scope that binds `name` as seen from `scope`, and its binding statements."""
        if scope is not None:
            params = {a.arg for a in [*scope.args.posonlyargs, *scope.args.args, *scope.args.kwonlyargs]}
            bound = self._bindings(name, scope)
            if name in params or bound:
                return scope, bound
        return None, self._bindings(name, None)

    # -- loaders ---------------------------------------------------------------------------------
    def _loader_call(self, expr: ast.expr, scope: Optional[ast.FunctionDef], depth: int = 0) -> Optional[ast.Call]:
        """The DataLoader(...) call a value is, through names and the functions that return loaders."""
        if depth > 4:
            return None
        if isinstance(expr, ast.Call) and self._full_name(expr.func).endswith("DataLoader"):
            return expr
        if isinstance(expr, ast.Name):
            owner, bound = self._resolve(expr.id, scope)
            if owner is not None and not bound:
                return self._parameter_loader(expr.id, owner, depth)
            values = [self._value_of(expr.id, statement) for statement in bound]
            calls = [self._loader_call(value, owner, depth + 1) if value is not None else None for value in values]
            return calls[0] if calls and all(calls) else None
        return None

    def _value_of(self, name: str, statement: ast.stmt) -> Optional[ast.expr]:
        if not isinstance(statement, ast.Assign) or len(statement.targets) != 1:
            return None
        target, value = statement.targets[0], statement.value
        if isinstance(target, ast.Name):
            return value
        if isinstance(target, ast.Tuple) and all(isinstance(e, ast.Name) for e in target.elts):
            index = [e.id for e in target.elts].index(name)  # type: ignore[attr-defined]
            if isinstance(value, ast.Tuple) and len(value.elts) == len(target.elts):
                return value.elts[index]
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in self.functions:
                returned = self._returned_element(self.functions[value.func.id], index, len(target.elts))
                return returned
        return None

    def _returned_element(self, function: ast.FunctionDef, index: int, size: int) -> Optional[ast.expr]:
        returns = [n for n in ast.walk(function) if isinstance(n, ast.Return) and self._function_of(n) is function]
        if len(returns) == 1 and isinstance(returns[0].value, ast.Tuple) and len(returns[0].value.elts) == size:
            element = returns[0].value.elts[index]
            if isinstance(element, ast.Call):
                return element
        return None

    def _parameter_loader(self, name: str, function: ast.FunctionDef, depth: int) -> Optional[ast.Call]:
        """A parameter is a loader when every call of its function hands one there."""
        arguments = self._arguments_at_calls(name, function)
        if not arguments:
            return None
        calls = [self._loader_call(argument, scope, depth + 1) for argument, scope in arguments]
        return calls[0] if all(calls) else None

    def _arguments_at_calls(self, name: str,
                            function: ast.FunctionDef) -> list[tuple[ast.expr, Optional[ast.FunctionDef]]]:
        positions = [a.arg for a in [*function.args.posonlyargs, *function.args.args]]
        found = []
        for node in ast.walk(self.tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == function.name):
                continue
            keyword = _keyword(node, name)
            if keyword is not None:
                found.append((keyword, self._function_of(node)))
            elif name in positions and positions.index(name) < len(node.args):
                found.append((node.args[positions.index(name)], self._function_of(node)))
            else:
                raise _Stop(node, f"`{function.name}(...)` is called without `{name}`, so ddpify cannot tell "
                                  "what its loop iterates")
        return found

    def _loader_loops(self) -> list[tuple[ast.For, ast.Call]]:
        loops = []
        for node in ast.walk(self.tree):
            if isinstance(node, ast.For):
                iterable = node.iter
                while isinstance(iterable, ast.Call) and self._full_name(iterable.func) in _ITERATION_WRAPPERS \
                        and iterable.args:
                    iterable = iterable.args[0]
                loader = self._loader_call(iterable, self._function_of(node))
                if loader is not None:
                    loops.append((node, loader))
        return loops

    # -- the run ---------------------------------------------------------------------------------
    def run(self) -> Placed:
        if not self.torch:
            raise _Stop(self.tree.body[0] if self.tree.body else self.tree, "the script imports no `torch` to "
                        "choose the device with")
        loops = self._loader_loops()
        if not loops:
            first_loop = next((node for node in ast.walk(self.tree) if isinstance(node, ast.For)), self.tree)
            raise _Stop(first_loop, "ddpify finds no loop over a DataLoader of the script whose batches it can move")
        anchor = self._device_anchor()
        path = self._training_path(loops)
        self._check_factories(path, loops)
        for loop, loader in loops:
            self._move_batches(loop, loader)
        self._check_model_calls_outside(loops)
        self._add_cpu_before_numpy()
        scope = self._scope_of_the_modules()
        if scope is not None:
            anchor = self._first_statement(scope)
            self._hand_the_device_to_other_functions(scope, loops)
        self._insert_before(anchor, [DEVICE_CHOICE], "DDP016")
        for statement, name in self.moved_modules.items():
            self._insert_after(statement, [f"{name}.to(device)"], "DDP130", f"`{name}` moved to the device where "
                               "it is built, before any wrap")
        return self._emit()

    def _scope_of_the_modules(self) -> Optional[ast.FunctionDef]:
        """The function that builds every module moved (the device is chosen at its top, where
        ddpify's setup goes), or None for the top level."""
        scopes = {self._function_of(statement) for statement in self.moved_modules}
        if len(scopes) != 1:
            raise _Stop(next(iter(self.moved_modules), self.tree.body[0]),
                        "the modules the loops call are built in different functions")
        scope = scopes.pop()
        if scope is not None and scope not in self.tree.body:
            raise _Stop(scope, f"the modules are built in `{scope.name}`, which is not a function of the top level")
        return scope

    @staticmethod
    def _first_statement(function: ast.FunctionDef) -> ast.stmt:
        first = function.body[0]
        docstring = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
        return function.body[1] if docstring and len(function.body) > 1 else first

    def _hand_the_device_to_other_functions(self, scope: ast.FunctionDef,
                                            loops: list[tuple[ast.For, ast.Call]]) -> None:
        """A loop in another function (`def train(model, loader, optimizer)`) finds the device on
        the model it is handed: `device = next(model.parameters()).device` at its top."""
        done: set[ast.FunctionDef] = set()
        for loop, _ in loops:
            function = self._function_of(loop)
            while function is not None and function is not scope:
                if function in self.tree.body:
                    break
                function = self._function_of(function)
            if function is scope or function in done:
                continue
            if function is None:
                raise _Stop(loop, "this loop runs at the top level, where the device chosen in "
                                  f"`{scope.name}` is not seen")
            model = self._model_parameter(function, loop)
            done.add(function)
            self._insert_before(self._first_statement(function), [f"device = next({model}.parameters()).device"])

    def _model_parameter(self, function: ast.FunctionDef, loop: ast.For) -> str:
        parameters = [a.arg for a in [*function.args.posonlyargs, *function.args.args]]
        for node in ast.walk(loop):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in parameters:
                arguments = self._arguments_at_calls(node.func.id, function)
                statements = [self._resolve(a.id, scope)[1] if isinstance(a, ast.Name) else []
                              for a, scope in arguments]
                trained = all(bound and all(b in self.moved_modules and not self._is_loss(b) for b in bound)
                              for bound in statements)
                if trained:
                    return node.func.id
        raise _Stop(loop, f"`{function.name}` is handed no model it calls, so the loop there cannot find the device")

    def _is_loss(self, statement: ast.stmt) -> bool:
        value = getattr(statement, "value", None)
        return isinstance(value, ast.Call) and self._full_name(value.func).endswith("Loss")

    def _device_anchor(self) -> ast.stmt:
        for statement in self.tree.body:
            is_docstring = isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
            if not isinstance(statement, (ast.Import, ast.ImportFrom)) and not is_docstring:
                torch_before = any(isinstance(s, ast.Import) and s.lineno < statement.lineno
                                   and any(a.name == "torch" for a in s.names) for s in self.tree.body)
                if not torch_before:
                    raise _Stop(statement, "torch is imported after the script's first statement")
                return statement
        raise _Stop(self.tree.body[-1], "the script has nothing after its imports")

    def _training_path(self, loops: list[tuple[ast.For, ast.Call]]) -> list[ast.AST]:
        """Loop bodies, the script's functions they call (transitively), the model classes' methods."""
        path: list[ast.AST] = [statement for loop, _ in loops for statement in loop.body]
        seen: set[str] = set()
        pending = list(path)
        while pending:
            for node in ast.walk(pending.pop()):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                    self._classify_call(node, path, pending, seen)
        return path

    def _classify_call(self, call: ast.Call, path: list[ast.AST], pending: list[ast.AST], seen: set[str]) -> None:
        name = call.func.id  # type: ignore[attr-defined]
        scope = self._function_of(call)
        owner, bound = self._resolve(name, scope)
        if not bound and owner is None:
            if name in self.functions and name not in seen:
                seen.add(name)
                path.append(self.functions[name])
                pending.append(self.functions[name])
            elif name in self.module_classes:
                owner_class = self._class_of(call)
                if owner_class is None or owner_class.name not in self.module_classes:
                    raise _Stop(call, f"`{name}(...)` builds a module inside the training loop")
                if name not in seen:  # a block the model's __init__ builds
                    seen.add(name)
                    path.append(self.module_classes[name])
                    pending.append(self.module_classes[name])
            elif name not in self.functions and name not in self.imported and name not in _SAFE_NAMES \
                    and name not in self.module_classes and not any(isinstance(s, ast.ClassDef) and s.name == name
                                                                    for s in self.tree.body):
                raise _Stop(call, f"`{name}` is called in the training loop, and ddpify cannot see where it is "
                                  "made")
            return
        if owner is not None and not bound:
            for argument, caller in self._arguments_at_calls(name, owner):
                self._follow_module(argument, caller, call, path, pending, seen)
            return
        for statement in bound:
            self._module_built(name, statement, call, path, pending, seen)

    def _follow_module(self, argument: ast.expr, scope: Optional[ast.FunctionDef], call: ast.Call,
                       path: list[ast.AST], pending: list[ast.AST], seen: set[str]) -> None:
        if not isinstance(argument, ast.Name):
            raise _Stop(call, f"`{dotted_ast(call.func)}` is handed an expression ddpify cannot follow to a module")
        owner, bound = self._resolve(argument.id, scope)
        if not bound:
            raise _Stop(call, f"`{argument.id}` is handed to the training loop from a value ddpify cannot see made")
        for statement in bound:
            self._module_built(argument.id, statement, call, path, pending, seen)

    def _module_built(self, name: str, statement: ast.stmt, call: ast.Call,
                      path: list[ast.AST], pending: list[ast.AST], seen: set[str]) -> None:
        """`name = SomeModule(...)`: moved after the statement; its class's methods join the path."""
        value = statement.value if isinstance(statement, (ast.Assign, ast.AnnAssign)) else None
        single = isinstance(statement, ast.Assign) and len(statement.targets) == 1 \
            and isinstance(statement.targets[0], ast.Name)
        if single and isinstance(value, (ast.Name, ast.Attribute)) \
                and self._full_name(value).startswith("torch.nn.functional."):
            return  # `loss_fn = F.cross_entropy`: a function, nothing to move
        if not single or not isinstance(value, ast.Call):
            raise _Stop(statement, f"`{name}`, called in the training loop, is made where ddpify cannot see a "
                                   "module built")
        full = self._full_name(value.func)
        if full == "copy.deepcopy" and self._copy_of_a_placed_module(value, statement, call, path, pending, seen):
            return  # an EMA or target copy made after its source's move is on the device already
        local = value.func.id if isinstance(value.func, ast.Name) else None
        if local in self.module_classes:
            if local not in seen:
                seen.add(local)
                path.append(self.module_classes[local])
                pending.append(self.module_classes[local])
        elif not full.startswith(("torch.nn.", "torchvision.models.")):
            raise _Stop(statement, f"`{name}` is made by `{dotted_ast(value.func)}(...)`, which may keep tensors "
                                   "ddpify cannot place")
        short = full.rpartition(".")[2]
        constants = all(isinstance(a, ast.Constant) for a in [*value.args, *(k.value for k in value.keywords)])
        if full.startswith("torch.nn.") and constants and (short.endswith("Loss") or short in _STATELESS):
            return  # holds no tensor: nothing to move
        self.moved_modules.setdefault(statement, name)
        for argument in [*value.args, *(k.value for k in value.keywords)]:
            for node in ast.walk(argument):  # (`nn.Sequential(Block(), ...)`: the blocks' classes too)
                block = node.func.id if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) else None
                if block in self.module_classes and block not in seen:
                    seen.add(block)
                    path.append(self.module_classes[block])
                    pending.append(self.module_classes[block])

    def _copy_of_a_placed_module(self, value: ast.Call, statement: ast.stmt, call: ast.Call,
                                 path: list[ast.AST], pending: list[ast.AST], seen: set[str]) -> bool:
        source = value.args[0] if len(value.args) == 1 else None
        if not isinstance(source, ast.Name):
            return False
        _, bound = self._resolve(source.id, self._function_of(statement))
        if len(bound) != 1 or bound[0].lineno >= statement.lineno:
            return False
        self._module_built(source.id, bound[0], call, path, pending, seen)
        return bound[0] in self.moved_modules

    # -- checks ----------------------------------------------------------------------------------
    def _check_factories(self, path: list[ast.AST], loops: list[tuple[ast.For, ast.Call]]) -> None:
        first: Optional[tuple[int, str]] = None
        for part in path:
            for node, reason in self._factories_in(part):
                if first is None or node.lineno < first[0]:
                    first = (node.lineno, reason)
        if first is not None:
            raise _Stop(ast.Pass(lineno=first[0]), first[1])
        self._check_tensors_made_outside(path, loops)
        self._check_tensors_handed_to_modules(path)

    def _check_tensors_handed_to_modules(self, path: list[ast.AST]) -> None:
        """`Normalize(torch.tensor(MEAN), ...)` whose `__init__` keeps the tensor as a plain attribute
        (`self.mean = mean`): no buffer, so `.to(device)` leaves it on the CPU, where the forward meets
        the batch with it."""
        for cls in (part for part in path if isinstance(part, ast.ClassDef)):
            init = next((m for m in cls.body if isinstance(m, ast.FunctionDef) and m.name == "__init__"), None)
            if init is None:
                continue
            positions = [a.arg for a in init.args.args][1:]
            kept = {statement.value.id for statement in ast.walk(init) if isinstance(statement, ast.Assign)
                    and isinstance(statement.value, ast.Name) and statement.value.id in positions
                    and any(isinstance(t, ast.Attribute) for t in statement.targets)}
            for call in ast.walk(self.tree):
                if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == cls.name):
                    continue
                handed = {positions[i]: a for i, a in enumerate(call.args) if i < len(positions)}
                handed |= {k.arg: k.value for k in call.keywords if k.arg}
                for parameter in sorted(kept & set(handed), key=positions.index):
                    if self._a_tensor_made_without_a_device(handed[parameter], self._function_of(call)):
                        raise _Stop(call, f"`{cls.name}` keeps its `{parameter}` as a plain attribute, which "
                                          "`.to(device)` does not move: register it as a buffer "
                                          f"(`self.register_buffer(\"{parameter}\", {parameter})`)")

    def _a_tensor_made_without_a_device(self, value: ast.expr, scope: Optional[ast.FunctionDef]) -> bool:
        if any(isinstance(n, ast.Call) and self._is_factory(n) for n in ast.walk(value)):
            return True
        if isinstance(value, ast.Name):
            _, bound = self._resolve(value.id, scope)
            return any(isinstance(b, ast.Assign) and any(isinstance(n, ast.Call) and self._is_factory(n)
                                                         for n in ast.walk(b.value)) for b in bound)
        return False

    def _factories_in(self, part: ast.AST) -> Iterator[tuple[Union[ast.expr, ast.stmt], str]]:
        yield from self._host_tensors_in(part)
        for node in ast.walk(part):
            if not (isinstance(node, ast.Call) and self._is_factory(node)):
                continue
            function = self._function_of(node)
            if function is not None and function.name == "__init__" and not self._kept_as_attribute(node):
                continue  # an __init__'s tensor that becomes no plain attribute
            if self._inside_keeper(node):
                continue
            code = ast.get_source_segment(self.code, node.func) or "torch factory"
            yield node, (f"`{code}(...)` makes a tensor without a device where the model meets the batches: "
                         "make it with `device=x.device` (or `x.new_zeros(...)`), or register it as a buffer")

    def _host_tensors_in(self, part: ast.AST) -> Iterator[tuple[Union[ast.expr, ast.stmt], str]]:
        """What a placement would leave on the CPU although nothing names the CPU: `.type(torch.LongTensor)`
        (a CPU tensor type: the batch comes back to the host) and, in a module's `__init__`, modules kept in
        a plain list or dict (no submodules: `.to(device)` does not reach their weights)."""
        for node in ast.walk(part):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "type" \
                    and len(node.args) == 1 and self._names_a_cpu_tensor_type(node.args[0]):
                code = ast.get_source_segment(self.code, node.args[0]) or "torch.Tensor"
                yield node, (f"`.type({code})` returns a tensor on the CPU whatever device it came from: write "
                             "`.long()`, `.float()` (or `.type(torch.long)`) to change the type alone")
            elif isinstance(node, ast.Assign) and isinstance(node.value, _DISPLAYS) \
                    and any(isinstance(t, ast.Attribute) for t in node.targets) and self._holds_modules(node.value):
                function = self._function_of(node)
                target = ast.get_source_segment(self.code, node.targets[0]) or "the attribute"
                if function is not None and function.name == "__init__" and self._class_of(node) is not None \
                        and not self._registered_later(target, function):
                    yield node, (f"`{target}` keeps modules in a plain list or dict, which `.to(device)` does "
                                 "not reach: hold them in `nn.ModuleList` / `nn.ModuleDict`")

    def _registered_later(self, attribute: str, init: ast.FunctionDef) -> bool:
        """`nn.Sequential(*self.layers)` or `nn.ModuleList(self.layers)` in the same `__init__`: the
        modules of the list are submodules after all."""
        return any(isinstance(node, ast.Call) and self._full_name(node.func).startswith("torch.nn.")
                   and any(dotted_ast(getattr(a, "value", a)) == attribute for a in node.args)
                   for node in ast.walk(init))

    def _names_a_cpu_tensor_type(self, argument: ast.expr) -> bool:
        if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
            return argument.value.startswith("torch.") and argument.value.endswith("Tensor")
        name = self._full_name(argument)
        return name.startswith("torch.") and name.count(".") == 1 and name.endswith("Tensor")

    def _holds_modules(self, display: ast.expr) -> bool:
        for node in ast.walk(display):
            if isinstance(node, ast.Call):
                name = self._full_name(node.func)
                if (name.startswith("torch.nn.") and name.rpartition(".")[2][:1].isupper()
                        and not name.startswith(("torch.nn.functional.", "torch.nn.Parameter"))) \
                        or (isinstance(node.func, ast.Name) and node.func.id in self.module_classes):
                    return True
        return False

    def _inside_keeper(self, node: ast.AST) -> bool:
        parent = self.parents.get(node)
        while parent is not None and not isinstance(parent, ast.stmt):
            if isinstance(parent, ast.Call) and (dotted_ast(parent.func) or "").rpartition(".")[2] in _KEEPERS:
                return True
            parent = self.parents.get(parent)
        return False

    def _kept_as_attribute(self, node: ast.Call) -> bool:
        """In __init__, a factory whose tensor becomes a plain attribute (`self.mask = torch.ones(n)`,
        or a local name that is then assigned to one), not a buffer or a parameter."""
        statement = self.parents.get(node)
        while statement is not None and not isinstance(statement, ast.stmt):
            statement = self.parents.get(statement)
        if self._inside_keeper(node) or not isinstance(statement, ast.Assign):
            return False
        if any(isinstance(t, ast.Attribute) for t in statement.targets):
            return True
        names = self._bound_names(statement)
        function = self._function_of(node)
        if function is None:
            return False
        return any(isinstance(n, ast.Assign) and any(isinstance(t, ast.Attribute) for t in n.targets)
                   and not self._inside_keeper_value(n.value)
                   and any(isinstance(v, ast.Name) and v.id in names for v in ast.walk(n.value))
                   for n in ast.walk(function))

    @staticmethod
    def _inside_keeper_value(value: ast.expr) -> bool:
        return isinstance(value, ast.Call) and (dotted_ast(value.func) or "").rpartition(".")[2] in _KEEPERS

    def _check_tensors_made_outside(self, path: list[ast.AST], loops: list[tuple[ast.For, ast.Call]]) -> None:
        """A name the path reads that its scope (or the top level) binds to a tensor made without a device."""
        drawn = {name for loop, _ in loops for name in self._bound_names(loop)}
        drawn |= {name for loop, _ in loops for statement in loop.body[:1] if isinstance(statement, ast.Assign)
                  and isinstance(statement.value, ast.Name) and statement.value.id in drawn
                  for name in self._bound_names(statement)}  # (`images, labels = data`)
        for part in path:
            for node in ast.walk(part):
                if not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)) or node.id in drawn:
                    continue  # (a part of the batch: moved where it is drawn)
                _, bound = self._resolve(node.id, self._function_of(node))
                if self._from_a_local_module(node) or any(self._from_a_local_module(value) for statement in bound
                                                          for value in ast.walk(statement)):
                    raise _Stop(node, f"`{node.id}` comes from a module of the project, which ddpify does not read "
                                      "for where its tensors are")
                for statement in bound:
                    if self._is_in(statement, path):
                        continue
                    value = statement.value if isinstance(statement, (ast.Assign, ast.AnnAssign)) else None
                    if value is not None and any(isinstance(c, ast.Call) and self._is_factory(c)
                                                 for c in ast.walk(value)) \
                            and not self._full_name(getattr(value, "func", value)).endswith(("DataLoader", "Dataset")):
                        if isinstance(value, ast.Call) and self._full_name(value.func).startswith("torch.nn."):
                            continue  # a module built from a tensor: moved with it
                        raise _Stop(statement, f"`{node.id}` is a tensor made without a device and read where the "
                                               "model meets the batches: make it on `device`, or move it there")

    def _from_a_local_module(self, node: ast.AST) -> bool:
        if not isinstance(node, ast.Name) or node.id not in self.imported:
            return False
        module = self.imported[node.id].lstrip(".")
        return any(module == name or module.startswith(name + ".") for name in self.local_modules)

    def _is_in(self, node: ast.AST, parts: list[ast.AST]) -> bool:
        parent: Optional[ast.AST] = node
        while parent is not None:
            if any(parent is part for part in parts):
                return True
            parent = self.parents.get(parent)
        return False

    def _check_model_calls_outside(self, loops: list[tuple[ast.For, ast.Call]]) -> None:
        """Every call of a module that is moved is made in a loader pass, on its moved batches."""
        names = set(self.moved_modules.values())
        bodies: list[ast.AST] = [s for loop, _ in loops for s in loop.body]
        for node in ast.walk(self.tree):
            called = self._module_called(node, names)
            if called is not None and not self._is_in(node, bodies):
                function = self._function_of(node)
                if function is not None and self._function_called_only_in(function, bodies):
                    continue
                raise _Stop(node, f"`{called}` is called outside a pass over a DataLoader, on inputs ddpify "
                                  "does not move")

    @staticmethod
    def _module_called(node: ast.AST, names: set[str]) -> Optional[str]:
        """`model(x)`, or a method of the module that computes on what it is handed (`model.forward(x)`,
        `model.generate(context)`), not one that reads or sets its state (`model.eval()`)."""
        if not isinstance(node, ast.Call):
            return None
        if isinstance(node.func, ast.Name) and node.func.id in names:
            return node.func.id
        function = node.func
        handed = [*node.args, *(k.value for k in node.keywords)]
        if isinstance(function, ast.Attribute) and isinstance(function.value, ast.Name) \
                and function.value.id in names and function.attr not in _BOOKKEEPING \
                and not all(isinstance(a, ast.Constant) for a in handed):
            return f"{function.value.id}.{function.attr}"
        return None

    def _function_called_only_in(self, function: ast.FunctionDef, bodies: list[ast.AST]) -> bool:
        calls = [n for n in ast.walk(self.tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                 and n.func.id == function.name]
        return bool(calls) and all(self._is_in(call, bodies) for call in calls)

    # -- batches ---------------------------------------------------------------------------------
    def _move_batches(self, loop: ast.For, loader: ast.Call) -> None:
        target = loop.target
        if isinstance(loop.iter, ast.Call) and self._full_name(loop.iter.func) == "enumerate":
            if not (isinstance(target, ast.Tuple) and len(target.elts) == 2):
                raise _Stop(loop, "the loop's target does not take the batch apart from its index")
            target = target.elts[1]
        pinned = isinstance(_keyword(loader, "pin_memory"), ast.Constant) \
            and _keyword(loader, "pin_memory").value is True  # type: ignore[union-attr]
        suffix = ", non_blocking=True" if pinned else ""
        first = loop.body[0]
        if first.lineno == loop.lineno:
            raise _Stop(loop, "the loop's body shares its line")
        dataset = self._dataset_class(loader, self._function_of(loop))
        kinds = self.batch_parts.of_loader(loader, dataset)
        if isinstance(target, (ast.Tuple, ast.List)):
            self._move_names(loop, first, target.elts, suffix, before=True, kinds=kinds)
        elif isinstance(target, ast.Name):
            self._move_one_batch(loop, target.id, suffix, kinds)
            self._check_lists_in_the_batch(loop, target.id, kinds, self.batch_parts.of_loader_keys(loader, dataset))
        else:
            raise _Stop(loop, "the batch is unpacked into parts ddpify cannot move")
        self._check_host_readers(loop, target)

    def _move_names(self, loop: ast.For, statement: ast.stmt, elements: list[ast.expr], suffix: str,
                    before: bool, kinds: Optional[list[Optional[str]]]) -> None:
        if not all(isinstance(e, ast.Name) for e in elements):
            raise _Stop(loop, "the batch is unpacked into nested parts ddpify cannot move")
        if kinds is not None and len(kinds) != len(elements):
            raise _Stop(loop, f"the loop takes the batch into {len(elements)} parts, its dataset returns {len(kinds)}")
        parts = [e for e in elements if isinstance(e, ast.Name)]
        names = [e.id for i, e in enumerate(parts)
                 if self._used_as_tensor(e.id, loop) and self._a_tensor_to_move(e, kinds[i] if kinds else None, loop)]
        if not names:
            raise _Stop(loop, "no part of the batch is used as a tensor")
        line = ", ".join(names) + " = " + ", ".join(f"{n}.to(device{suffix})" for n in names)
        if before:
            self._insert_before(statement, [line])
        else:
            self._insert_after(statement, [line])

    def _a_tensor_to_move(self, part: ast.Name, kind: Optional[str], loop: ast.For) -> bool:
        """Only tensors have `.to`: a part the dataset or collate_fn makes of strings (paths, captions)
        or plain numbers stays as it is, and so does a tensor of lengths `pack_padded_sequence` needs on
        the CPU; a list (which may hold tensors the model meets) stops the placement."""
        if kind == batch_parts.HOST or self._lengths_kept_on_the_host(part.id, loop):
            return False
        if kind == batch_parts.CONTAINER:
            raise _Stop(part, f"the batch part `{part.id}` is a list (its dataset or collate_fn makes a list, tuple "
                              "or dict), which has no `.to`: collate it into a tensor, or move its tensors yourself")
        return True

    def _lengths_kept_on_the_host(self, name: str, loop: ast.For) -> bool:
        """`pack_padded_sequence(x, lengths)` wants `lengths` on the CPU: handed there in the loop,
        or to the parameter of a model's `forward` that is."""
        for node in ast.walk(loop):
            if isinstance(node, ast.Call) and self._takes_lengths_as(node, name):
                return True
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                forward = self._forward_of(node.func.id, loop)
                if forward is None:
                    continue
                parameters = [a.arg for a in forward.args.args][1:]
                handed = {parameters[i]: a for i, a in enumerate(node.args) if i < len(parameters)}
                handed |= {k.arg: k.value for k in node.keywords if k.arg}
                if any(isinstance(a, ast.Name) and a.id == name and any(
                        isinstance(n, ast.Call) and self._takes_lengths_as(n, p) for n in ast.walk(forward))
                        for p, a in handed.items()):
                    return True
        return False

    def _takes_lengths_as(self, call: ast.Call, name: str) -> bool:
        if not self._full_name(call.func).endswith("pack_padded_sequence"):
            return False
        lengths = call.args[1] if len(call.args) > 1 else _keyword(call, "lengths")
        return isinstance(lengths, ast.Name) and lengths.id == name

    def _forward_of(self, module: str, loop: ast.For) -> Optional[ast.FunctionDef]:
        _, bound = self._resolve(module, self._function_of(loop))
        built = {statement.value.func.id for statement in bound if statement in self.moved_modules
                 and isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Call)
                 and isinstance(statement.value.func, ast.Name)}
        classes = [self.module_classes[name] for name in built if name in self.module_classes]
        return next((m for c in classes[:1] for m in c.body if isinstance(m, ast.FunctionDef)
                     and m.name == "forward"), None)

    def _dataset_class(self, loader: ast.Call, scope: Optional[ast.FunctionDef], depth: int = 0) -> Optional[str]:
        """The script's Dataset class a loader draws from, through names and `Subset(...)`."""
        dataset = loader.args[0] if loader.args else _keyword(loader, "dataset")
        return self._class_built(dataset, scope, depth) if dataset is not None else None

    def _class_built(self, value: ast.expr, scope: Optional[ast.FunctionDef], depth: int) -> Optional[str]:
        if depth > 4:
            return None
        if isinstance(value, ast.Call):
            if isinstance(value.func, ast.Name) and value.func.id in self.batch_parts.datasets:
                return value.func.id
            if self._full_name(value.func).endswith("Subset") and value.args:
                return self._class_built(value.args[0], scope, depth + 1)
            return None
        if isinstance(value, ast.Name):
            owner, bound = self._resolve(value.id, scope)
            classes = {self._class_built(v, owner, depth + 1) if v is not None else None
                       for v in (self._value_of(value.id, statement) for statement in bound)}
            return classes.pop() if len(classes) == 1 else None
        return None

    def _used_as_tensor(self, name: str, loop: ast.For) -> bool:
        """A part of the batch the loop computes with: not an ignored `_`, nor one only printed,
        counted, appended or measured (`len(names)`, `paths.append(...)`, `x.size(0)`), which may
        be no tensor at all (a list of file names) and needs no move."""
        if name == "_":
            return False
        return any(isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load)
                   and not self._only_looked_at(node) for node in ast.walk(loop))

    def _only_looked_at(self, node: ast.expr) -> bool:
        user, parent = node, self.parents.get(node)
        while isinstance(parent, ast.Subscript) and parent.value is user:
            user, parent = parent, self.parents.get(parent)
        if isinstance(parent, ast.Attribute):
            return parent.attr in _MEASURES
        if isinstance(parent, ast.keyword):
            parent = self.parents.get(parent)
        if isinstance(parent, ast.Call) and user is not parent.func:
            callee = parent.func
            return (isinstance(callee, ast.Name) and callee.id in _LOOKERS) \
                or (isinstance(callee, ast.Attribute) and callee.attr in _COLLECTORS)
        return isinstance(parent, ast.FormattedValue)

    def _move_one_batch(self, loop: ast.For, name: str, suffix: str, kinds: Optional[list[Optional[str]]]) -> None:
        first = loop.body[0]
        reads = [n for n in ast.walk(loop) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)]
        if isinstance(first, ast.Assign) and len(first.targets) == 1 and isinstance(first.value, ast.Name) \
                and first.value.id == name and isinstance(first.targets[0], (ast.Tuple, ast.List)) and len(reads) == 1:
            self._move_names(loop, first, first.targets[0].elts, suffix, before=False,
                             kinds=kinds)  # `inputs, labels = data`
            return
        slices = [self.parents.get(n) for n in reads]
        if not reads or not all(isinstance(s, ast.Subscript) and s.value is n and isinstance(s.slice, ast.Constant)
                                for s, n in zip(slices, reads)):
            raise _Stop(loop, f"the batch `{name}` is used whole, and ddpify cannot tell what it holds")
        keys = {type(s.slice.value) for s in slices}  # type: ignore[union-attr]
        if keys == {str}:
            line = (f"{name} = {{key: value.to(device{suffix}) if isinstance(value, torch.Tensor) else value "
                    f"for key, value in {name}.items()}}")
        elif keys == {int}:
            line = f"{name} = [item.to(device{suffix}) if isinstance(item, torch.Tensor) else item for item in {name}]"
        else:
            raise _Stop(loop, f"the batch `{name}` is read by keys ddpify cannot follow")
        self._insert_before(first, [line])

    def _check_lists_in_the_batch(self, loop: ast.For, name: str, kinds: Optional[list[Optional[str]]],
                                  keys: dict[str, Optional[str]]) -> None:
        """`batch["views"]` or `batch[1]` that the dataset makes a list: the move of the batch's tensors
        passes over it, and the tensors in it stay on the CPU."""
        for node in ast.walk(loop):
            if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == name
                    and isinstance(node.slice, ast.Constant)) or self._only_looked_at(node):
                continue
            key = node.slice.value
            kind = keys.get(key) if isinstance(key, str) else (
                kinds[key] if isinstance(key, int) and kinds is not None and 0 <= key < len(kinds) else None)
            if kind == batch_parts.CONTAINER:
                raise _Stop(node, f"`{name}[{key!r}]` is a list (its dataset or collate_fn makes a list, tuple or "
                                  "dict), whose tensors the move of the batch passes over: collate it into a tensor")

    def _check_host_readers(self, loop: ast.For, target: ast.expr) -> None:
        """A value computed from the batch or the model handed to numpy, matplotlib, sklearn..."""
        tainted = {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        modules = set(self.moved_modules.values())
        for node in ast.walk(loop):
            if isinstance(node, ast.Assign) and any(isinstance(n, ast.Name) and (n.id in tainted or n.id in modules)
                                                    for n in ast.walk(node.value)):
                tainted |= self._bound_names(node)
        for node in ast.walk(loop):
            if not isinstance(node, ast.Call):
                continue
            root = self._full_name(node.func).split(".")[0]
            if root not in _HOST_READERS:
                continue
            for argument in node.args:
                names = {n.id for n in ast.walk(argument) if isinstance(n, ast.Name)}
                to_host = any(isinstance(n, ast.Attribute) and n.attr in ("cpu", "item", "tolist", "numpy")
                              for n in ast.walk(argument))
                if names & tainted and not to_host:
                    raise _Stop(node, f"`{dotted_ast(node.func)}` reads a tensor of the batch on the host: "
                                      "hand it `.cpu()` of it")
        self._check_lists_read_on_the_host(loop, tainted)

    def _check_lists_read_on_the_host(self, loop: ast.For, tainted: set[str]) -> None:
        """A list the pass fills with tensors of the batch or the model (`y_pred.extend(predicted)`,
        `outputs.append(model(x))`) handed to numpy, sklearn or matplotlib after the pass: on the GPU
        they are CUDA tensors, which numpy cannot read."""
        filled = set()
        for node in ast.walk(loop):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in ("append", "extend") and isinstance(node.func.value, ast.Name) \
                    and any(self._reads_on_the_device(argument, tainted) for argument in node.args):
                filled.add(node.func.value.id)
        if filled:
            self._check_host_reads_after(self._function_of(loop), loop.end_lineno or loop.lineno, filled, 0)

    def _check_host_reads_after(self, scope: Optional[ast.FunctionDef], line: int, filled: set[str],
                                depth: int) -> None:
        """What `scope` does after `line` with `filled`: handed to numpy, sklearn, matplotlib; or
        returned (`return y_true, y_pred`), and then what each caller does with the result."""
        after = sorted((n for n in (ast.walk(scope) if scope is not None else self._top_level_nodes())
                        if isinstance(n, (ast.Assign, ast.Call, ast.Return)) and n.lineno > line
                        and self._function_of(n) is scope), key=lambda n: (n.lineno, n.col_offset))
        for node in after:
            if isinstance(node, ast.Assign) and self._reads_on_the_device(node.value, filled):
                filled = filled | self._bound_names(node)  # (`preds = torch.cat(outputs)`)
            elif isinstance(node, ast.Call) and self._full_name(node.func).split(".")[0] in _HOST_READERS \
                    and any(self._reads_on_the_device(a, filled)
                            for a in [*node.args, *(k.value for k in node.keywords)]):
                raise _Stop(node, f"`{dotted_ast(node.func)}` reads tensors the pass kept on the device: keep "
                                  "`.cpu()` of them (or `.tolist()`)")
            elif isinstance(node, ast.Return) and node.value is not None and scope is not None and depth < 3 \
                    and self._reads_on_the_device(node.value, filled):
                for call in ast.walk(self.tree):
                    if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == scope.name:
                        statement = self.parents.get(call)
                        if isinstance(statement, ast.Assign):
                            self._check_host_reads_after(self._function_of(statement), statement.lineno,
                                                         self._bound_names(statement), depth + 1)

    @staticmethod
    def _reads_on_the_device(expression: ast.expr, names: set[str]) -> bool:
        """`expression` reads one of `names` and brings nothing of it to the host."""
        read = any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(expression))
        return read and not any(isinstance(n, ast.Attribute) and n.attr in ("cpu", "item", "tolist", "numpy")
                                for n in ast.walk(expression))

    def _add_cpu_before_numpy(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "numpy" \
                    and not node.args:
                receiver = node.func.value
                already = isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Attribute) \
                    and receiver.func.attr == "cpu"
                owner = self._function_of(node)
                in_data = owner is not None and owner.name in ("__getitem__", "__init__", "__len__")
                if already or in_data or receiver.end_lineno != node.func.end_lineno:
                    continue
                self.cpu_at.add((receiver.end_lineno or 0, receiver.end_col_offset or 0))
                self.notes.append(("DDP017", node.lineno, RULES[1].summary))

    # -- emitting --------------------------------------------------------------------------------
    def _indent_of(self, statement: ast.stmt) -> str:
        line = self.lines[statement.lineno - 1]
        indent = line[: len(line) - len(line.lstrip())]
        if len(indent.encode()) != statement.col_offset:
            raise _Stop(statement, "the statement shares its line with another")
        return indent

    def _insert_before(self, statement: ast.stmt, code: list[str], note: str = "", detail: str = "") -> None:
        indent = self._indent_of(statement)
        index = statement.lineno - 1
        while index > 0 and self.lines[index - 1].strip().startswith("#") \
                and self.lines[index - 1].startswith(indent) and index - 1 not in self.inserts:
            index -= 1  # above the statement's own comment block, which stays with it
        self.inserts.setdefault(index, []).extend((indent + line + "\n", statement.lineno) for line in code)
        if note:
            self.notes.append((note, statement.lineno, detail))

    def _insert_after(self, statement: ast.stmt, code: list[str], note: str = "", detail: str = "") -> None:
        indent = self._indent_of(statement)
        end = statement.end_lineno or statement.lineno
        self.inserts.setdefault(end, [])[0:0] = [(indent + line + "\n", statement.lineno) for line in code]
        if note:
            self.notes.append((note, statement.lineno, detail))

    def _emit(self) -> Placed:
        lines, original = [], []
        for index, line in enumerate(self.lines):
            for inserted, stands_for in self.inserts.get(index, ()):
                lines.append(inserted)
                original.append(stands_for)
            encoded = line.encode()
            for column in sorted((c for (n, c) in self.cpu_at if n == index + 1), reverse=True):
                encoded = encoded[:column] + b".cpu()" + encoded[column:]
            lines.append(encoded.decode())
            original.append(index + 1)
        if not self.lines or not self.lines[-1].endswith("\n"):
            lines[-1:] = [lines[-1] + "\n"] if lines else []
        for inserted, stands_for in self.inserts.get(len(self.lines), ()):
            lines.append(inserted)
            original.append(stands_for)
        notes = [Diagnostic(code, line, 1, detail or _summary(code)) for code, line, detail in self.notes]
        return Placed("".join(lines), original, notes)


def _summary(code: str) -> str:
    return next(rule.summary for rule in RULES if rule.code == code)
