"""What each part of a loader's batches is once collated, read from the script's own Dataset
`__getitem__` or `collate_fn`, for the GPU placement (rules/gpu_placement.py).

Rule: a part is a TENSOR when the function that makes it returns a torch value (or, through the
default collate, a number or a numpy array, which it turns into tensors); HOST when it returns
strings (a path, a caption, an id as text: the default collate keeps them a list of strings),
or, from a `collate_fn`, plain numbers; a CONTAINER when it returns a list, tuple or dict (the
collate keeps it a list, whose items may be tensors). Anything else is unknown (None). Only a
tensor has `.to(device)`: a list of paths handed `.to` raises on every device.
"""
import ast
from collections.abc import Callable
from typing import Optional

from ddpify.analysis.ast_names import dotted_ast

TENSOR, HOST, CONTAINER = "tensor", "host", "container"

_STRING_CALLS = frozenset({"str", "repr", "format", "os.path.join", "os.path.basename", "os.path.splitext",
                           "os.path.dirname", "os.path.abspath", "os.path.relpath"})
_STRING_METHODS = frozenset({"format", "strip", "lower", "upper", "replace", "join", "rstrip", "lstrip", "title"})
_NUMBER_CALLS = frozenset({"int", "float", "len", "bool", "round"})
_LIST_CALLS = frozenset({"list", "sorted", "tuple", "dict"})
# Calls that list file names (`self.paths = sorted(glob.glob(...))`): their items are strings.
_FILE_LISTS = ("os.listdir", "glob.glob", "glob.iglob", "os.scandir")
# torchvision's folder datasets: a sample is (image, class index); `samples`/`imgs` hold (path, class index).
_FOLDERS = ("ImageFolder", "DatasetFolder")
_FOLDER_SAMPLES = frozenset({"self.imgs", "self.samples"})


class BatchParts:
    """Reads the kinds of a loader's batch parts from a script's classes and functions.
    `full_name` spells a callee with the script's imports resolved (`np.load` -> `numpy.load`)."""

    def __init__(self, tree: ast.Module, full_name: Callable[[ast.expr], str]) -> None:
        self.full_name = full_name
        self.functions = {s.name: s for s in tree.body if isinstance(s, ast.FunctionDef)}
        self.classes = {s.name: s for s in tree.body if isinstance(s, ast.ClassDef)}
        self.datasets = {name: s for name, s in self.classes.items()
                         if any(isinstance(m, ast.FunctionDef) and m.name == "__getitem__" for m in s.body)}

    def of_loader(self, loader: ast.Call, dataset_class: Optional[str]) -> Optional[list[Optional[str]]]:
        """The kind of each part of the loader's tuple batches, or None when ddpify cannot read them.
        `dataset_class`: the script's Dataset class the loader draws from, when the caller knows it."""
        collate = next((k.value for k in loader.keywords if k.arg == "collate_fn"), None)
        if collate is not None:
            maker = self._collate_function(collate)
            return self._returned(maker, None, collated=True) if maker is not None else None
        dataset = self.datasets.get(dataset_class or "")
        if dataset is None:
            return None
        getitem = next(m for m in dataset.body if isinstance(m, ast.FunctionDef) and m.name == "__getitem__")
        return self._returned(getitem, dataset, collated=False)

    def of_loader_keys(self, loader: ast.Call, dataset_class: Optional[str]) -> dict[str, Optional[str]]:
        """The kind of each key of the loader's dict batches (`return {"image": x, "views": [a, b]}`),
        where every return of the dataset's `__getitem__` or the collate_fn is one dict display."""
        collate = next((k.value for k in loader.keywords if k.arg == "collate_fn"), None)
        owner = None if collate is not None else self.datasets.get(dataset_class or "")
        if collate is not None:
            maker = self._collate_function(collate)
        else:
            maker = next((m for m in owner.body if isinstance(m, ast.FunctionDef) and m.name == "__getitem__"),
                         None) if owner is not None else None
        returns = [n.value for n in _own_nodes(maker) if isinstance(n, ast.Return)]
        if maker is None or len(returns) != 1 or not isinstance(returns[0], ast.Dict):
            return {}
        return {key.value: self._kind(value, maker, owner, collate is not None, 0)
                for key, value in zip(returns[0].keys, returns[0].values)
                if isinstance(key, ast.Constant) and isinstance(key.value, str)}

    def _collate_function(self, collate: ast.expr) -> Optional[ast.FunctionDef]:
        """`collate_fn=pad_batch`, or `collate_fn=Collator(pad_index)`: a class of the script whose
        `__call__` collates."""
        if isinstance(collate, ast.Name):
            return self.functions.get(collate.id)
        if isinstance(collate, ast.Call) and isinstance(collate.func, ast.Name) and collate.func.id in self.classes:
            return next((m for m in self.classes[collate.func.id].body if isinstance(m, ast.FunctionDef)
                         and m.name == "__call__"), None)
        return None

    def _returned(self, function: ast.FunctionDef, owner: Optional[ast.ClassDef],
                  collated: bool) -> Optional[list[Optional[str]]]:
        returns = [n.value for n in _own_nodes(function) if isinstance(n, ast.Return) and n.value is not None]
        kinds = [self._tuple_kinds(value, function, owner, collated) for value in returns]
        if not kinds or any(k is None for k in kinds) or len({len(k) for k in kinds if k is not None}) != 1:
            return None
        return [column[0] if len(set(column)) == 1 else None for column in zip(*kinds)]  # type: ignore[misc]

    def _tuple_kinds(self, value: ast.expr, function: ast.FunctionDef, owner: Optional[ast.ClassDef],
                     collated: bool) -> Optional[list[Optional[str]]]:
        if isinstance(value, (ast.Tuple, ast.List)):
            return [self._kind(e, function, owner, collated, 0) for e in value.elts]
        if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add) and isinstance(value.right, ast.Tuple) \
                and owner is not None and self._folder_sample(value.left, function, owner):
            # `super().__getitem__(index) + (path,)`: torchvision's (image, class index), then its own parts
            return [None, TENSOR, *(self._kind(e, function, owner, collated, 0) for e in value.right.elts)]
        return None

    def _folder_sample(self, value: ast.expr, function: ast.FunctionDef, owner: ast.ClassDef) -> bool:
        """`super().__getitem__(index)` (or a name bound to it) in a subclass of torchvision's ImageFolder."""
        if isinstance(value, ast.Name):
            bound = [s.value for s in _own_nodes(function) if isinstance(s, ast.Assign) and len(s.targets) == 1
                     and isinstance(s.targets[0], ast.Name) and s.targets[0].id == value.id]
            return len(bound) == 1 and self._folder_sample(bound[0], function, owner)
        return isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) \
            and value.func.attr == "__getitem__" and isinstance(value.func.value, ast.Call) \
            and dotted_ast(value.func.value.func) == "super" and _on_a_folder(owner, self.full_name)

    def _kind(self, value: ast.expr, function: ast.FunctionDef, owner: Optional[ast.ClassDef],
              collated: bool, depth: int) -> Optional[str]:
        if depth > 3:
            return None
        if isinstance(value, ast.JoinedStr) or (isinstance(value, ast.Constant) and isinstance(value.value, str)):
            return HOST
        if isinstance(value, ast.Constant) and isinstance(value.value, (int, float)):
            return HOST if collated else TENSOR
        if isinstance(value, (ast.List, ast.ListComp, ast.Tuple, ast.Dict, ast.DictComp)):
            return CONTAINER
        if isinstance(value, ast.Call):
            return self._call_kind(value, collated)
        if isinstance(value, ast.Name):
            bound = [s for s in _own_nodes(function) if isinstance(s, ast.Assign) and len(s.targets) == 1
                     and value.id in {n.id for n in ast.walk(s.targets[0]) if isinstance(n, ast.Name)}]
            kinds = {self._kind(s.value, function, owner, collated, depth + 1)
                     if isinstance(s.targets[0], ast.Name) else self._unpacked_kind(s, value.id, owner)
                     for s in bound}
            return kinds.pop() if len(kinds) == 1 else None
        if isinstance(value, ast.Subscript) and owner is not None and not collated:
            return self._item_kind(value.value, owner)
        return None

    def _unpacked_kind(self, statement: ast.Assign, name: str, owner: Optional[ast.ClassDef]) -> Optional[str]:
        """`path, target = self.samples[index]` in an ImageFolder subclass: a path, then a class index."""
        target, value = statement.targets[0], statement.value
        if not (isinstance(target, ast.Tuple) and len(target.elts) == 2 and isinstance(value, ast.Subscript)
                and dotted_ast(value.value) in _FOLDER_SAMPLES and owner is not None
                and _on_a_folder(owner, self.full_name)):
            return None
        names = [e.id if isinstance(e, ast.Name) else None for e in target.elts]
        return HOST if names[0] == name else TENSOR

    def _call_kind(self, call: ast.Call, collated: bool) -> Optional[str]:
        name = self.full_name(call.func)
        if name.startswith("torch.") and not name.startswith("torch.utils."):
            return TENSOR
        if name in _STRING_CALLS or (isinstance(call.func, ast.Attribute) and call.func.attr in _STRING_METHODS):
            return HOST
        if name in _NUMBER_CALLS or name.startswith("numpy."):
            return HOST if collated else TENSOR
        if name in _LIST_CALLS:
            return CONTAINER
        return None

    def _item_kind(self, container: ast.expr, owner: ast.ClassDef) -> Optional[str]:
        """`self.paths[index]`: an item of what `__init__` keeps there; `self.imgs[index][0]` of an
        ImageFolder: the image's path."""
        if isinstance(container, ast.Subscript) and dotted_ast(container.value) in _FOLDER_SAMPLES \
                and _on_a_folder(owner, self.full_name):
            return HOST
        attribute = dotted_ast(container) or ""
        if not attribute.startswith("self."):
            return None
        init = next((m for m in owner.body if isinstance(m, ast.FunctionDef) and m.name == "__init__"), None)
        values = [s.value for s in _own_nodes(init) if isinstance(s, ast.Assign)
                  and any(dotted_ast(t) == attribute for t in s.targets)] if init is not None else []
        kinds = {self._items_of(v) for v in values}
        return kinds.pop() if len(kinds) == 1 else None

    def _items_of(self, value: ast.expr) -> Optional[str]:
        if isinstance(value, ast.ListComp):
            element = value.elt
            strings = isinstance(element, ast.JoinedStr) or (isinstance(element, ast.Call)
                                                             and self._call_kind(element, False) == HOST)
            return HOST if strings else None
        if isinstance(value, ast.List) and value.elts and all(
                isinstance(e, ast.JoinedStr) or (isinstance(e, ast.Constant) and isinstance(e.value, str))
                for e in value.elts):
            return HOST
        if isinstance(value, ast.Call):
            name = self.full_name(value.func)
            if name in ("sorted", "list") and value.args and isinstance(value.args[0], ast.Call):
                return self._items_of(value.args[0])
            if name in _FILE_LISTS:
                return HOST
            if name.startswith("torch.") and not name.startswith("torch.utils."):
                return TENSOR
        return None


def _on_a_folder(owner: ast.ClassDef, full_name: Callable[[ast.expr], str]) -> bool:
    return any(full_name(base).startswith("torchvision.datasets.") and full_name(base).endswith(_FOLDERS)
               for base in owner.bases)


def _own_nodes(function: Optional[ast.FunctionDef]) -> list[ast.AST]:
    """The nodes of a function outside the functions and classes it defines."""
    if function is None:
        return []
    found: list[ast.AST] = []
    pending: list[ast.AST] = list(function.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        found.append(node)
        pending.extend(ast.iter_child_nodes(node))
    return found
