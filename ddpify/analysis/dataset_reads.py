"""Where a module may read a DataLoader's `.dataset` (read with `ast`, for every module of a
project): what a DataLoader subclass that iterates its sampler's split as a Subset under
torchrun (subset_splits.subclass_split) would change, wherever its instances go.

Conservative, since an instance made by `config.init_obj('data_loader', module_data)` can be
read anywhere under any name: every `x.dataset` read counts, but for `self.dataset` in a
class that is no loader (no base, or only bases named as datasets and modules are: its own
attribute) and `self.dataset` in an `__init__` up to its `super().__init__(...)` (set and
handed to the base before the DataLoader holds anything).
"""
import ast
from typing import Optional

from ddpify import ast_walk
from ddpify.analysis.ast_names import dotted_ast


def dataset_reads(tree: ast.Module) -> list[int]:
    """The lines of the `.dataset` reads that may be a DataLoader's, in source order."""
    skipped: set[int] = set()  # ids of the Attribute nodes that are not a loader's
    for node in ast_walk.walk(tree):
        if isinstance(node, ast.ClassDef):
            skipped |= _own_reads(node)
    return sorted(node.lineno for node in ast_walk.walk(tree)
                  if isinstance(node, ast.Attribute) and node.attr == "dataset"
                  and isinstance(node.ctx, ast.Load) and id(node) not in skipped)


def class_methods(tree: ast.Module) -> set[tuple[str, str]]:
    """(class, method) for every method a class of the module defines: a subclass elsewhere
    that overrides the method a base class splits its samplers with hands the base another
    sampler (subset_splits.subclass_split)."""
    return {(node.name, method.name) for node in ast_walk.walk(tree) if isinstance(node, ast.ClassDef)
            for method in node.body if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _own_reads(node: ast.ClassDef) -> set[int]:
    """The `self.dataset` reads of this class that are not a DataLoader's."""
    reads = {id(read): read for method in node.body if isinstance(method, ast.FunctionDef)
             for read in ast_walk.walk(method) if isinstance(read, ast.Attribute) and _self_dataset(read)}
    if not _may_be_a_loader(node):
        return set(reads)
    init = next((method for method in node.body if isinstance(method, ast.FunctionDef)
                 and method.name == "__init__"), None)
    handed_at = _super_init_line(init) if init is not None else None
    if init is None or handed_at is None:
        return set()
    return {key for key, read in reads.items()
            if read.lineno <= handed_at and any(read is each for each in ast_walk.walk(init))}


def _self_dataset(node: ast.Attribute) -> bool:
    return node.attr == "dataset" and isinstance(node.ctx, ast.Load) \
        and isinstance(node.value, ast.Name) and node.value.id == "self"


def _may_be_a_loader(node: ast.ClassDef) -> bool:
    """A class with a base that is not named as a dataset, a module or `object`."""
    for base in node.bases:
        name = (dotted_ast(base) or "").rsplit(".", 1)[-1]
        if not (name.endswith("Dataset") or name in ("Module", "object", "Subset")):
            return True
    return False


def _super_init_line(init: ast.FunctionDef) -> Optional[int]:
    """The last line of the first `super().__init__(...)` call of `__init__`."""
    for node in ast_walk.walk(init):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "__init__" \
                and isinstance(node.func.value, ast.Call) and isinstance(node.func.value.func, ast.Name) \
                and node.func.value.func.id == "super":
            return node.end_lineno
    return None
