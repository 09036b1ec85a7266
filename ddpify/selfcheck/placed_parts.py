"""In a script ddpify placed on the GPU, no batch part that its dataset or collate_fn makes of
strings or of a list is handed `.to(...)` (DDP954).

Rule (conservative, stdlib `ast` only, a reading separate from rules/gpu_placement.py and
analysis/batch_parts.py): a loop `for a, b, c in loader` (through enumerate or tqdm), where `loader`
is bound once to `DataLoader(dataset, ...)`, takes its parts from the tuple that the `collate_fn=`
function of the file returns, or else that `__getitem__` of the dataset's class returns. A part
returned as a string (literal, f-string, `str(...)`, `.format(...)`, an item of a list of strings
that `__init__` keeps: `self.files[index]`), as a list, tuple or dict display or comprehension,
or as a name bound to one of those in that function, is no tensor once collated: `.to(device)` or
`.cuda()` of it in the loop raises AttributeError on the first batch, on CPU and GPU ranks alike.
"""
import ast
from collections.abc import Iterator
from typing import Optional

from ddpify.diagnostics import Diagnostic
from ddpify.selfcheck.placed_factories import findings_at_the_placed_lines
from ddpify.selfcheck.source import dotted

_WRAPPERS = frozenset({"enumerate", "tqdm", "tqdm.tqdm", "iter"})
_DISPLAYS = (ast.List, ast.ListComp, ast.Tuple, ast.Dict, ast.DictComp, ast.JoinedStr)


def placed_parts_check(placed: str, migrated: str) -> list[Diagnostic]:
    """DDP954 findings at the lines of `placed` (the script as placed, before the migration)."""
    return findings_at_the_placed_lines("DDP954", non_tensors_moved, placed, migrated)


def non_tensors_moved(tree: ast.Module) -> Iterator[tuple[int, str]]:
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    for loop in ast.walk(tree):
        if not (isinstance(loop, ast.For) and isinstance(loop.target, ast.Tuple)):
            continue
        loader = _loader_of(loop, tree)
        returned = _returned_tuple(loader, tree, functions, classes) if loader is not None else None
        if returned is None:
            continue
        function, elements = returned
        owner = next((c for c in classes.values() if function in c.body), None)
        target = loop.target.elts
        if isinstance(loop.iter, ast.Call) and dotted(loop.iter.func) == "enumerate" and len(target) == 2 \
                and isinstance(target[1], ast.Tuple):
            target = target[1].elts
        if len(target) != len(elements):
            continue
        for part, element in zip(target, elements):
            if isinstance(part, ast.Name) and _no_tensor(element, function, owner):
                for node in ast.walk(loop):
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                            and node.func.attr in ("to", "cuda") and isinstance(node.func.value, ast.Name) \
                            and node.func.value.id == part.id:
                        yield node.lineno, (f"`{part.id}` is made of strings or a list by `{function.name}`, and "
                                            f"has no `.{node.func.attr}`")


def _loader_of(loop: ast.For, tree: ast.Module) -> Optional[ast.Call]:
    iterable = loop.iter
    while isinstance(iterable, ast.Call) and dotted(iterable.func) in _WRAPPERS and iterable.args:
        iterable = iterable.args[0]
    if isinstance(iterable, ast.Call) and (dotted(iterable.func) or "").endswith("DataLoader"):
        return iterable
    if not isinstance(iterable, ast.Name):
        return None
    calls = [node.value for node in ast.walk(tree) if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
             and (dotted(node.value.func) or "").endswith("DataLoader")
             and any(isinstance(t, ast.Name) and t.id == iterable.id for t in node.targets)]
    return calls[0] if len(calls) == 1 else None


def _returned_tuple(loader: ast.Call, tree: ast.Module, functions: dict[str, ast.FunctionDef],
                    classes: dict[str, ast.ClassDef]) -> Optional[tuple[ast.FunctionDef, list[ast.expr]]]:
    collate = next((k.value for k in loader.keywords if k.arg == "collate_fn"), None)
    if collate is not None:
        maker = functions.get(collate.id) if isinstance(collate, ast.Name) else None
    else:
        dataset = loader.args[0] if loader.args else None
        if isinstance(dataset, ast.Name):  # (`train_set = Files(...)`, bound once)
            built = [node.value for node in ast.walk(tree) if isinstance(node, ast.Assign)
                     and any(isinstance(t, ast.Name) and t.id == dataset.id for t in node.targets)]
            dataset = built[0] if len(built) == 1 else None
        name = dotted(dataset.func) if isinstance(dataset, ast.Call) else None
        owner = classes.get(name or "")
        maker = next((m for m in owner.body if isinstance(m, ast.FunctionDef) and m.name == "__getitem__"),
                     None) if owner is not None else None
    if maker is None:
        return None
    returns = [node.value for node in ast.walk(maker) if isinstance(node, ast.Return)]
    if len(returns) != 1 or not isinstance(returns[0], ast.Tuple):
        return None
    return maker, returns[0].elts


def _no_tensor(element: ast.expr, function: ast.FunctionDef, owner: Optional[ast.ClassDef]) -> bool:
    if isinstance(element, ast.Name):
        values = [node.value for node in ast.walk(function) if isinstance(node, ast.Assign)
                  and any(isinstance(t, ast.Name) and t.id == element.id for t in node.targets)]
        return len(values) == 1 and _no_tensor(values[0], function, owner)
    if isinstance(element, ast.Constant):
        return isinstance(element.value, str)
    if isinstance(element, ast.Subscript) and isinstance(element.value, ast.Attribute):
        return _strings_kept_in(element.value, owner)  # `self.files[index]`
    if isinstance(element, ast.Call):
        return dotted(element.func) == "str" or (isinstance(element.func, ast.Attribute)
                                                 and element.func.attr == "format")
    return isinstance(element, _DISPLAYS)


def _strings_kept_in(attribute: ast.Attribute, owner: Optional[ast.ClassDef]) -> bool:
    """`__init__` of the dataset keeps a list of strings there (`self.files = [f"{i}.png" for ...]`)."""
    init = next((m for m in owner.body if isinstance(m, ast.FunctionDef) and m.name == "__init__"),
                None) if owner is not None else None
    if init is None or dotted(attribute) is None:
        return False
    values = [node.value for node in ast.walk(init) if isinstance(node, ast.Assign)
              and any(dotted(t) == dotted(attribute) for t in node.targets)]
    if len(values) != 1:
        return False
    value = values[0]
    if isinstance(value, ast.ListComp):
        return isinstance(value.elt, ast.JoinedStr)
    return isinstance(value, ast.List) and bool(value.elts) and all(
        isinstance(e, ast.JoinedStr) or (isinstance(e, ast.Constant) and isinstance(e.value, str)) for e in value.elts)
