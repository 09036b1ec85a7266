"""Modules with nothing to migrate, told from their `ast` tree before libcst reads them.

A project's helper modules are mostly layers, configs and small computations: the full
reading (libcst's parse, the collector, every rule) finds nothing in them, at several times
the cost of the `ast` tree the compile check has already built. A module passes only when
everything in it is known to be inert, from short lists of what it may contain, never of
what it may not: calls of a few builtins, of torch's tensor functions and layers, of `math`,
of its own functions and classes, and of the functions and classes of the project's other
modules that are inert themselves (a model built from the project's layers); methods that
read or compute; nothing on a device, no output, no loader, no optimizer. Whatever is
not on a list sends the module to the full reading (tests/test_inert.py runs both on every
module of the fixtures, the projects and the real-world suites).
"""
import ast
from typing import Callable, Optional

from ddpify import ast_walk
from ddpify.analysis import effects, names
from ddpify.analysis.ast_names import dotted_ast

# Builtins that compute or build, and the exceptions a helper raises. Not set(): a set read
# in its order (a vocabulary) is reported even in a module that does not train (DDP227).
_BUILTIN_CALLS = frozenset(f"builtins.{name}" for name in (
    "len", "int", "float", "str", "bool", "round", "min", "max", "abs", "range", "enumerate",
    "zip", "format", "repr", "isinstance", "sum", "sorted", "list", "dict", "tuple",
    "divmod", "map", "filter", "any", "all", "reversed", "super", "ValueError", "TypeError",
    "KeyError", "IndexError", "RuntimeError", "NotImplementedError", "AssertionError",
))
_LAYERS = frozenset(f"torch.nn.{name}" for name in (
    "Linear", "Bilinear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
    "ReLU", "GELU", "SiLU", "Tanh", "Sigmoid", "LeakyReLU", "ELU", "Softmax", "LogSoftmax",
    "Dropout", "Dropout2d", "LayerNorm", "GroupNorm", "Embedding", "Sequential", "ModuleList",
    "ModuleDict", "Identity", "MaxPool1d", "MaxPool2d", "AvgPool1d", "AvgPool2d",
    "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "Flatten", "Unflatten", "Upsample",
))
_CALLS = _BUILTIN_CALLS | _LAYERS | (effects.TENSOR_FUNCTIONS - {"torch.no_grad", "torch.inference_mode"}) | {
    f"torch.{name}" for name in ("relu", "tanh", "matmul", "bmm", "einsum", "cumsum", "tril", "triu")
} | {"os.path.join"}
_CALL_PREFIXES = ("math.", "torch.nn.functional.")
# What a name of an imported module may stand for where it is not called.
_REFERENCES = frozenset({"torch.nn.Module", "torch.Tensor"})
_BASES = frozenset({"torch.nn.Module", "builtins.object"})
# Methods that compute a new value from their object (effects.READING_METHODS, less those
# that leave torch or name a model's parameters).
_METHODS = frozenset({
    "mean", "sum", "max", "min", "argmax", "norm", "size", "dim", "numel", "keys", "values",
    "items", "format", "join", "split", "strip", "rstrip", "lstrip", "replace", "startswith",
    "endswith", "upper", "lower", "view", "reshape", "squeeze", "unsqueeze", "t", "transpose",
    "permute", "contiguous", "flatten", "clone", "clamp", "mul", "add", "sub", "div", "abs",
    "sqrt", "exp", "log", "softmax", "sigmoid", "std", "var", "expand_as", "type_as",
})
# Attributes the analysis reads facts from, wherever they appear.
_ATTRIBUTES = effects.MODULE_ONLY_METHODS | {
    "module", "requires_grad", "requires_grad_", "environ", "backward", "step", "to", "cuda", "cpu",
    "state_dict", "load_state_dict", "zero_grad", "sampler", "dataset",
}
# Words of names and strings that choose or name a device.
_DEVICE_WORDS = ("cuda", "cpu", "gpu", "mps", "xpu", "device", "nccl", "gloo", "rank")
_DECORATORS = frozenset({"property", "staticmethod", "classmethod"})


# Whether a qualified name ("layers.Block") is a function or class of one of the project's own
# modules that is inert itself (project.Project.inert_definition).
InertElsewhere = Callable[[str], bool]


def _nowhere(_qualified: str) -> bool:
    return False


def nothing_to_migrate(tree: ast.Module, inert_elsewhere: InertElsewhere = _nowhere, package: str = "") -> bool:
    """Every statement of the module is on the lists above (see the module's docstring).
    `package` is the one its relative imports start from."""
    aliases: dict[str, str] = {}
    for statement in tree.body:
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
            if not _note_import(statement, aliases, package, inert_elsewhere is not _nowhere):
                return False
        elif not isinstance(statement, (ast.FunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)) and not (
                isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)):
            return False
    return _Module(tree, aliases, inert_elsewhere).inert()


def _note_import(statement: ast.Import | ast.ImportFrom, aliases: dict[str, str], package: str,
                 in_project: bool) -> bool:
    """The names an import binds, as the collector reads them; False for what it cannot name."""
    if isinstance(statement, ast.Import):
        for alias in statement.names:
            names.add_import(aliases, alias.name, alias.asname)
        return True
    if statement.level or statement.module is None:
        # A module of the project's own: what it binds is none of the lists' names, only
        # what the project says is inert. A star import of one (a package's `__init__.py`
        # re-exporting its modules) binds names the module cannot see: a call of one is
        # not on a list, and a name that is only referred to does nothing.
        module = effects.absolute_module(statement, package) if in_project else None
        for alias in statement.names:
            aliases[alias.asname or alias.name] = f"{module or '<project>'}.{alias.name}"
        return module is not None or all(alias.name != "*" for alias in statement.names)
    for alias in statement.names:
        if alias.name == "*":
            return False
        names.add_import_from(aliases, statement.module, alias.name, alias.asname)
    return True


class _Module:
    def __init__(self, tree: ast.Module, aliases: dict[str, str], inert_elsewhere: InertElsewhere) -> None:
        self.tree = tree
        self.aliases = aliases
        self.inert_elsewhere = inert_elsewhere
        self.definitions = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
        self.methods = {method.name for node in tree.body if isinstance(node, ast.ClassDef)
                        for method in node.body if isinstance(method, ast.FunctionDef)}
        self.layers: set[str] = set()  # `self.X = nn.Linear(...)`: X
        self.own_calls: set[str] = set()  # `self.X(...)` of no method of the module's: X
        # Attributes and names inside a longer chain (`a` and `a.b` of `a.b.c`).
        self.inner: set[int] = set()

    def inert(self) -> bool:
        called: set[int] = set()
        # ast.walk goes breadth first: a node's call and its longer chain come before it.
        for node in ast_walk.walk(self.tree):
            if isinstance(node, ast.Attribute):
                self.inner.add(id(node.value))
            elif isinstance(node, ast.Call):
                called.add(id(node.func))
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and self._qualified(
                    node.value.func) in _LAYERS:
                self.layers.update(target.attr for target in node.targets if isinstance(target, ast.Attribute)
                                   and isinstance(target.value, ast.Name) and target.value.id == "self")
            if not self._node_inert(node, id(node) in called):
                return False
        return self.own_calls <= self.layers

    def _node_inert(self, node: ast.AST, is_callee: bool) -> bool:
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.AsyncFunctionDef, ast.AsyncFor, ast.AsyncWith,
                             ast.Global, ast.Nonlocal, ast.Compare) + _MATCH):
            # Imports are read at the top only; a comparison may test a device string.
            return isinstance(node, (ast.Import, ast.ImportFrom)) and node in self.tree.body or (
                isinstance(node, ast.Compare) and not any(_is_string(side) for side in
                                                          [node.left, *node.comparators]))
        if isinstance(node, ast.SetComp):
            return False
        if isinstance(node, ast.Constant):
            return not isinstance(node.value, str) or not _names_a_device(node.value)
        if isinstance(node, ast.FunctionDef):
            return not _names_a_device(node.name) and all(
                isinstance(decorator, ast.Name) and decorator.id in _DECORATORS
                or isinstance(decorator, ast.Attribute) and decorator.attr in ("setter", "getter", "deleter")
                for decorator in node.decorator_list)
        if isinstance(node, ast.ClassDef):
            return not node.decorator_list and not node.keywords and all(
                self._qualified(base) in _BASES or isinstance(base, ast.Name) and base.id in self.definitions
                or self._inert_elsewhere(base) for base in node.bases)
        if isinstance(node, ast.arg):
            return not _names_a_device(node.arg)
        if isinstance(node, ast.keyword):
            return node.arg != "download" and not (node.arg and _names_a_device(node.arg))
        if isinstance(node, ast.For):
            return not (isinstance(node.iter, ast.Call) and len(node.iter.args) == 3)
        if isinstance(node, ast.Call):
            return self._call_inert(node)
        if isinstance(node, (ast.Name, ast.Attribute)):
            return self._reference_inert(node, is_callee)
        return True

    def _call_inert(self, call: ast.Call) -> bool:
        func = call.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call):
            # `x.flatten(1).sum()`, `super().__init__()`: the inner call is read on its own.
            inner = func.value.func
            return func.attr in _METHODS or (
                func.attr == "__init__" and isinstance(inner, ast.Name) and inner.id == "super")
        dotted = dotted_ast(func)
        if dotted is None:
            return False
        head, _, rest = dotted.partition(".")
        if head in self.aliases:
            qualified = names.qualify(dotted, self.aliases)
            return qualified in _CALLS or qualified.startswith(_CALL_PREFIXES) or self.inert_elsewhere(qualified)
        if not rest:
            return dotted in self.definitions or names.qualify(dotted, self.aliases) in _BUILTIN_CALLS
        method = rest.rpartition(".")[2]
        if head == "self":
            # `self.model.eval()` may act on a model a subclass elsewhere trains.
            if "." in rest:
                return False
            if method not in _METHODS and method not in self.methods:
                self.own_calls.add(method)  # a layer of its own, once all are known
            return True
        return method in _METHODS

    def _reference_inert(self, node: ast.Name | ast.Attribute, is_callee: bool) -> bool:
        if isinstance(node, ast.Attribute) and (node.attr in _ATTRIBUTES or _names_a_device(node.attr)):
            return False
        if isinstance(node, ast.Name) and _names_a_device(node.id):
            return False
        if id(node) in self.inner or is_callee:
            return True  # the whole chain, or the call, is read on its own
        dotted = dotted_ast(node)
        if dotted is None:
            return True
        head, _, rest = dotted.partition(".")
        if head in self.aliases:
            qualified = names.qualify(dotted, self.aliases)
            return qualified in _REFERENCES or qualified.startswith("math.") or self.inert_elsewhere(qualified)
        # `self.model.weight` may read through a model a subclass elsewhere trains.
        return not (head == "self" and "." in rest)

    def _inert_elsewhere(self, base: ast.expr) -> bool:
        dotted = dotted_ast(base)
        return dotted is not None and dotted.partition(".")[0] in self.aliases and self.inert_elsewhere(
            names.qualify(dotted, self.aliases))

    def _qualified(self, node: ast.expr) -> Optional[str]:
        dotted = dotted_ast(node)
        return names.qualify(dotted, self.aliases) if dotted is not None else None


_MATCH = tuple(getattr(ast, name) for name in ("Match", "TryStar") if hasattr(ast, name))


def _is_string(node: ast.expr) -> bool:
    return isinstance(node, (ast.Constant, ast.JoinedStr)) and (
        isinstance(node, ast.JoinedStr) or isinstance(node.value, str))


def _names_a_device(text: str) -> bool:
    lowered = text.lower()
    return any(word in lowered for word in _DEVICE_WORDS)
