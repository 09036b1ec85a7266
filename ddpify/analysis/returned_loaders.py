"""A dict of DataLoaders that a function of the project returns, read with `ast` from the
module that calls it (`loaders = data.get_dataloaders(cfg)`): its keys, and which entries
the function's own module shards when it is migrated.

That module has no loop over the dict in sight, so it shards by look (rules/loader_dicts.py,
`_trains_by_look`, with names.trains_by_look): the entry's key and its dataset's name (or the
name of a loader built before and put in the dict), then its `shuffle=`. The caller's module
reads the same decision here, so that it sets the epoch of exactly the entries that get a
DistributedSampler and reports a training pass over an entry left whole.
"""
import ast
from typing import Callable, Optional, Union, cast

from ddpify import ast_walk
from ddpify.analysis.ast_names import dotted_ast
from ddpify.analysis.names import trains_by_look

# An entry: the DataLoader call that builds it, and the name it was built under first.
_Entry = tuple[ast.Call, Optional[str]]


def returned_loader_dict(function: ast.FunctionDef, builds_loader: Callable[[ast.expr], bool]
                         ) -> Optional[dict[str, bool]]:
    """Key -> whether the entry is sharded, for the dict of DataLoaders the function returns
    (a literal, a comprehension over literal keys, `dict(key=...)`, or a name bound to one of
    them once); None when it returns anything else, or more than one such dict."""
    bound: dict[str, list[ast.expr]] = {}
    returns: list[ast.Return] = []
    for node in _own_nodes(function):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            bound.setdefault(node.targets[0].id, []).append(node.value)
        elif isinstance(node, ast.Return):
            returns.append(node)
    if len(returns) != 1 or returns[0].value is None:
        return None
    value = returns[0].value
    if isinstance(value, ast.Name):
        values = bound.get(value.id, [])
        if len(values) != 1:
            return None
        value = values[0]
    if isinstance(value, ast.Dict) and not value.keys and isinstance(returns[0].value, ast.Name):
        return _filled_per_key(function, returns[0].value.id, builds_loader)
    entries = _entries(value, bound, builds_loader)
    if not entries:
        return None
    variable = _key_variable(value)
    return {key: _sharded(key, call, built_as, variable) for key, (call, built_as) in entries.items()}


def _filled_per_key(function: ast.FunctionDef, name: str, builds_loader: Callable[[ast.expr], bool]
                    ) -> Optional[dict[str, bool]]:
    """`loaders = {}`, then `for split in ["train", "val", "test"]:` whose pass stores one
    loader by the loop's key (`loaders[split] = dl`): the loader built in the pass, or, when
    `if split == "train":` / `else:` build it apart, the one the key's branch builds. Tests
    of anything but the key (`if split in types:`) keep every branch; keys whose loaders
    the migration would shard differently, or that no loader is built for, say no."""
    stores = [node for node in _own_nodes(function) if isinstance(node, ast.Assign) and len(node.targets) == 1
              and isinstance(node.targets[0], ast.Subscript) and isinstance(node.targets[0].value, ast.Name)
              and node.targets[0].value.id == name]
    loops = [loop for loop in _own_nodes(function) if isinstance(loop, ast.For)
             and any(store in _own_nodes(loop) for store in stores)]
    if len(stores) != 1 or len(loops) != 1 or not isinstance(stores[0].targets[0], ast.Subscript):
        return None
    store, loop = stores[0], loops[0]
    key_name, keys = _keys_looped(loop)
    key = store.targets[0].slice  # type: ignore[attr-defined]
    if key_name is None or keys is None or not isinstance(key, ast.Name) or key.id != key_name:
        return None
    stored = store.value
    if isinstance(stored, ast.Call) and builds_loader(stored):
        return {key: _sharded(key, stored, None, key_name) for key in keys}
    if not isinstance(stored, ast.Name):
        return None
    built = [(node.value, _tests_on_the_way(loop, node)) for node in _own_nodes(loop)
             if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
             and node.targets[0].id == stored.id]
    if not built or not all(isinstance(call, ast.Call) and builds_loader(call) for call, _ in built):
        return None
    sharded: dict[str, bool] = {}
    for key in keys:
        decisions = {_sharded(key, cast(ast.Call, call), stored.id, None) for call, tests in built
                     if all(_holds(test, holds, key_name, key) is not False for test, holds in tests)}
        if len(decisions) != 1:
            return None
        sharded[key] = decisions.pop()
    return sharded


def _keys_looped(loop: ast.For) -> tuple[Optional[str], Optional[list[str]]]:
    """`for split in ["train", "val"]` or `for i, split in enumerate(("train", "val"))`: the
    key's variable and the literal keys it takes."""
    target, iterated = loop.target, loop.iter
    if isinstance(target, ast.Tuple) and len(target.elts) == 2 and isinstance(iterated, ast.Call) \
            and isinstance(iterated.func, ast.Name) and iterated.func.id == "enumerate" and len(iterated.args) == 1:
        target, iterated = target.elts[1], iterated.args[0]
    if not isinstance(target, ast.Name):
        return None, None
    return target.id, _literal_strings(iterated)


def _tests_on_the_way(loop: ast.For, target: ast.AST) -> list[tuple[ast.expr, bool]]:
    """The `if` tests between the loop and `target`, each with whether the branch taken
    holds it (True in its body, False in its `else`)."""
    def walk(statements: list[ast.stmt], tests: list[tuple[ast.expr, bool]]
             ) -> Optional[list[tuple[ast.expr, bool]]]:
        for statement in statements:
            if statement is target:
                return tests
            if isinstance(statement, ast.If):
                found = walk(statement.body, [*tests, (statement.test, True)]) \
                    or walk(statement.orelse, [*tests, (statement.test, False)])
            elif isinstance(statement, (ast.With, ast.Try)):
                found = walk(statement.body, tests)
            else:
                found = None
            if found is not None:
                return found
        return None
    return walk(loop.body, []) or []


def _holds(test: ast.expr, holds: bool, variable: str, key: str) -> Optional[bool]:
    """Whether the branch is taken for `key`: a test of the key variable against literal
    strings (`split == "train"`, `split in ("val", "test")`) is read; None for any other."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Name)
            and test.left.id == variable):
        return None
    comparator = test.comparators[0]
    values = _literal_strings(comparator)
    if values is None and isinstance(comparator, ast.Constant) and isinstance(comparator.value, str):
        values = [comparator.value]
    if values is None:
        return None
    operator = test.ops[0]
    if isinstance(operator, (ast.Eq, ast.In)):
        return (key in values) == holds
    if isinstance(operator, (ast.NotEq, ast.NotIn)):
        return (key not in values) == holds
    return None


def _own_nodes(function: Union[ast.FunctionDef, ast.For]) -> list[ast.AST]:
    """The nodes of the function (or loop), not of a function or class defined inside it."""
    found: list[ast.AST] = []
    work: list[ast.AST] = list(function.body)
    while work:
        node = work.pop()
        found.append(node)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            work.extend(ast_walk.child_nodes(node))
    return found


def _entries(value: ast.expr, bound: dict[str, list[ast.expr]], builds_loader: Callable[[ast.expr], bool]
             ) -> dict[str, _Entry]:
    pairs: list[tuple[Optional[str], ast.expr]] = []
    if isinstance(value, ast.Dict):
        pairs = [(key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else None, entry)
                 for key, entry in zip(value.keys, value.values) if key is not None]
    elif isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "dict" \
            and not value.args:
        pairs = [(keyword.arg, keyword.value) for keyword in value.keywords]
    elif isinstance(value, ast.DictComp) and len(value.generators) == 1:
        keys = _literal_strings(value.generators[0].iter)
        if keys is None or not isinstance(value.key, ast.Name) or not isinstance(value.generators[0].target, ast.Name) \
                or value.key.id != value.generators[0].target.id or not isinstance(value.value, ast.Call) \
                or not builds_loader(value.value):
            return {}
        call = value.value
        return {key: (call, None) for key in keys}
    entries: dict[str, _Entry] = {}
    for key, entry in pairs:
        if key is None:
            return {}
        made = bound.get(entry.id, []) if isinstance(entry, ast.Name) else []
        if isinstance(entry, ast.Call) and builds_loader(entry):
            entries[key] = (entry, None)
        elif isinstance(entry, ast.Name) and len(made) == 1 and isinstance(made[0], ast.Call) \
                and builds_loader(made[0]):
            entries[key] = (made[0], entry.id)
        else:
            return {}  # an entry that is not a loader: not a dict of loaders
    return entries


def _key_variable(value: ast.expr) -> Optional[str]:
    if isinstance(value, ast.DictComp) and isinstance(value.generators[0].target, ast.Name):
        return value.generators[0].target.id
    return None


def _sharded(key: str, call: ast.Call, built_as: Optional[str], variable: Optional[str]) -> bool:
    """The migration's decision for the entry: by the name it was built under, for a loader
    built by name first (rules/data.py reads it like any named loader), else by key and
    dataset."""
    if built_as is not None:
        return trains_by_look(built_as, _shuffles(call, key, None))
    dataset = _dataset(call)
    words = " ".join(word for word in (key, dotted_ast(dataset) if dataset is not None else None) if word)
    return trains_by_look(words, _shuffles(call, key, variable))


def _shuffles(call: ast.Call, key: str, variable: Optional[str]) -> bool:
    """`shuffle=` is on for this key: absent or False is off; a test of the comprehension's
    key variable (`shuffle=split == "train"`) is read for the key; anything else is on."""
    shuffle = next((keyword.value for keyword in call.keywords if keyword.arg == "shuffle"), None)
    if shuffle is None or isinstance(shuffle, ast.Constant) and (shuffle.value is False or shuffle.value is None):
        return False
    if variable is not None and isinstance(shuffle, ast.Compare) and len(shuffle.ops) == 1 \
            and isinstance(shuffle.left, ast.Name) and shuffle.left.id == variable:
        values = _literal_strings(shuffle.comparators[0])
        if values is None and isinstance(shuffle.comparators[0], ast.Constant) \
                and isinstance(shuffle.comparators[0].value, str):
            values = [shuffle.comparators[0].value]
        operator = shuffle.ops[0]
        if values is not None and isinstance(operator, (ast.Eq, ast.In)):
            return key in values
        if values is not None and isinstance(operator, (ast.NotEq, ast.NotIn)):
            return key not in values
    return True


def _dataset(call: ast.Call) -> Optional[ast.expr]:
    keyword = next((keyword.value for keyword in call.keywords if keyword.arg == "dataset"), None)
    if keyword is not None:
        return keyword
    return call.args[0] if call.args and not isinstance(call.args[0], ast.Starred) else None


def _literal_strings(node: ast.expr) -> Optional[list[str]]:
    if isinstance(node, (ast.Tuple, ast.List)) and node.elts and all(
            isinstance(element, ast.Constant) and isinstance(element.value, str) for element in node.elts):
        return [element.value for element in node.elts]  # type: ignore[attr-defined]
    return None
