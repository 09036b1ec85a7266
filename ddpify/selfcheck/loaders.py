"""Every DataLoader of the output is sharded or reported, and every shuffling
DistributedSampler gets set_epoch (DDP912)."""
import ast
from collections.abc import Iterator
from typing import Optional

from ddpify import ast_walk
from ddpify.selfcheck.source import FUNCTIONS, Source, calls_named, dotted, last_part
from ddpify.selfcheck.stepped_passes import loader_pass_steps

SHARDERS = ("DistributedSampler", "evaluation_shard")
# Diagnostics that say a loader was left whole on purpose, or is sharded by a batch sampler of
# the user's own (DDP221), reported at the loader's call.
LEFT_WHOLE_CODES = ("DDP203", "DDP204", "DDP205", "DDP207", "DDP210", "DDP213", "DDP218", "DDP221")
# No set_epoch placed, and the migration says why: no epoch loop found (DDP211), or none needed
# for a loader passed over once (DDP220).
NO_EPOCH_LOOP_CODES = ("DDP211", "DDP220")

Finding = tuple[str, int, str]


def loader_calls(source: Source) -> list[ast.Call]:
    """Calls of torch's DataLoader, under any alias; not of a class of the same name that a
    module other than torch's gives (cs230's `from model.data_loader import DataLoader`, a
    batch maker of the project's own, which the migration reads as no DataLoader either)."""
    aliases = {"DataLoader"} | {alias for alias, name in source.imported_as.items() if name == "DataLoader"}
    return [call for call in source.calls if last_part(call.func) in aliases
            and not (isinstance(call.func, ast.Name) and call.func.id in source.imported_from_elsewhere)]


def unsharded_loaders(original: Source, migrated: Source, reported_lines: set[int],
                      set_epoch_reported: bool, evaluation_lines: frozenset[int] = frozenset()
                      ) -> Iterator[Finding]:
    """A loader without a distributed sampler passes when a diagnostic of the migration names
    its call in the original (the n-th loader of the output is the n-th of the original). A
    missing set_epoch passes when the migration said so (DDP211). A loader the migration left
    whole as an evaluation one (`evaluation_lines`, DDP203) does not pass when this check sees
    an optimizer step during its pass (stepped_passes.py): every rank would train on all of it."""
    added = _helpers_added(original, migrated)
    sharders = set(SHARDERS) | added
    sharding_names = set(_sharder_bindings(migrated, sharders))
    original_loaders = loader_calls(original)
    # (Not the loaders of the helpers the migration defined, evaluation_share's own: the
    # n-th of the user's loaders stays the n-th.)
    migrated_loaders = [call for call in loader_calls(migrated) if not _inside(call, migrated, added)]
    for index, call in enumerate(migrated_loaders):
        sampler = _sampler_argument(call)
        if sampler is not None and _shards(sampler, sharders, sharding_names):
            continue
        if len(original_loaders) == len(migrated_loaders):
            twin = original_loaders[index]
            lines = range(twin.lineno, (twin.end_lineno or twin.lineno) + 1)
            if any(line in evaluation_lines for line in lines) and loader_pass_steps(migrated, call):
                yield "DDP938", call.lineno, "every rank trains on the whole loader: give it a DistributedSampler"
                continue
            if any(line in reported_lines for line in lines):
                continue
        yield "DDP912", call.lineno, "this DataLoader has no DistributedSampler and no diagnostic says why"
    if not set_epoch_reported:
        yield from _samplers_without_set_epoch(migrated)


def _inside(call: ast.Call, source: Source, definitions: set[str]) -> bool:
    """The call sits in one of these top-level definitions of the source."""
    return any(isinstance(node, (*FUNCTIONS, ast.ClassDef)) and node.name in definitions
               and node.lineno <= call.lineno <= (node.end_lineno or node.lineno) for node in source.tree.body)


def _sampler_argument(call: ast.Call) -> Optional[ast.AST]:
    for keyword in call.keywords:
        if keyword.arg in ("sampler", "batch_sampler"):
            return keyword.value
    return None


def _helpers_added(original: Source, migrated: Source) -> set[str]:
    """Functions and classes the migration defined (evaluation_shard, a sampler wrapper): a
    sampler ddpify built with its own helper is its distributed sampler."""
    defined = {node.name for node in migrated.tree.body if isinstance(node, (*FUNCTIONS, ast.ClassDef))}
    return defined - {node.name for node in original.tree.body if isinstance(node, (*FUNCTIONS, ast.ClassDef))}


def _shards(value: ast.AST, sharders: set[str], sharding_names: set[str]) -> bool:
    return calls_named(value, sharders) or any(loose_dotted(node) in sharding_names for node in ast_walk.walk(value))


def loose_dotted(node: ast.AST) -> Optional[str]:
    """dotted() seeing through subscripts: `samplers["train"]` is `samplers`, and
    `loaders[phase].sampler` is `loaders.sampler` (loaders and samplers kept in dicts), and
    `getattr(train_dl, "dl", train_dl)` is `train_dl.dl` (a loader inside a wrapper object)."""
    if isinstance(node, ast.Subscript):
        return loose_dotted(node.value)
    if (isinstance(node, ast.Call) and dotted(node.func) == "getattr" and len(node.args) == 3
            and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
        base = loose_dotted(node.args[0])
        return None if base is None else f"{base}.{node.args[1].value}"
    if isinstance(node, ast.Attribute):
        base = loose_dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return dotted(node)


def _sharder_bindings(source: Source, sharders: set[str]) -> dict[str, list[ast.Call]]:
    """`sampler` in `sampler = DistributedSampler(...) if distributed else None`. A name may
    be bound by several calls: one per branch of a dataset choice."""
    bindings: dict[str, list[ast.Call]] = {}
    for call in source.calls:
        if last_part(call.func) in sharders:
            statement = source.statement_of(call)
            if isinstance(statement, (ast.Assign, ast.AnnAssign)):
                for target in statement.targets if isinstance(statement, ast.Assign) else [statement.target]:
                    name = dotted(target)
                    if name is not None:
                        bindings.setdefault(name, []).append(call)
    return bindings


def _samplers_without_set_epoch(source: Source) -> Iterator[Finding]:
    """A shuffling DistributedSampler repeats its order every epoch without set_epoch; it is
    called on the sampler's name, or on `loader.sampler` of a loader built with it."""
    epoch_receivers = {loose_dotted(call.func.value) for call in source.calls
                       if isinstance(call.func, ast.Attribute) and call.func.attr == "set_epoch"}
    through_loader = any(name and name.endswith(".sampler") for name in epoch_receivers)
    bindings = _sharder_bindings(source, {"DistributedSampler"})
    for call in source.calls:
        if last_part(call.func) != "DistributedSampler" or not _shuffles(call):
            continue
        names = [name for name, bound in bindings.items() if any(each is call for each in bound)]
        if any(name in epoch_receivers for name in names):
            continue
        if through_loader and _given_to_a_loader(source, call, names):
            continue
        if _loader_handed_out(source, call, names) or _loader_handed_on(source, call, names):
            continue
        if _given_to_own_init(source, names) or _loader_kept_on_the_object(source, call, names):
            continue
        yield "DDP912", call.lineno, "this shuffling DistributedSampler never gets set_epoch(epoch)"


def _shuffles(call: ast.Call) -> bool:
    for keyword in call.keywords:
        if keyword.arg == "shuffle":
            return not (isinstance(keyword.value, ast.Constant) and keyword.value.value is False)
    return len(call.args) < 4  # DistributedSampler(dataset, num_replicas, rank, shuffle)


def _loader_handed_out(source: Source, sampler: ast.Call, names: list[str]) -> bool:
    """The loader built with the sampler is returned to the caller (a helper module's
    `get_loader()`): the caller starts the passes over it, and sets the epoch there."""
    built = _loaders_built_with(source, sampler, names)
    returned = _returned_parts(source)
    # `return DataLoader(dataset, sampler=sampler, ...)` hands it out too.
    built_in_return = any(
        isinstance(value, ast.Call) and value in loader_calls(source)
        and any(each is sampler or loose_dotted(each) in names
                for each in ast_walk.walk(_sampler_argument(value) or value.func))
        for value in returned)
    return built_in_return or bool(built & {loose_dotted(value) for value in returned})


def _returned_parts(source: Source) -> list[ast.expr]:
    """What the functions return, opened up: each element of a returned tuple, each entry of
    a returned dict (a literal, a comprehension, `dict(...)`), also of a dict bound to a name
    first (`loaders = {...}` then `return loaders`), the loader names a returned name is given,
    and what is stored into such a name by
    key (`loaders = {}`, then `loaders[split] = dl` in a loop over the splits)."""
    bound, stored = _bound_and_stored(source)
    parts: list[ast.expr] = []
    work = [node.value for node in ast_walk.walk(source.tree)
            if isinstance(node, ast.Return) and node.value is not None]
    seen: set[int] = set()
    while work:
        value = work.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        parts.append(value)
        if isinstance(value, ast.Tuple):
            work.extend(value.elts)
        elif isinstance(value, ast.Dict):
            work.extend(value.values)
        elif isinstance(value, ast.DictComp):
            work.append(value.value)
        elif isinstance(value, ast.Call) and dotted(value.func) == "dict":
            work.extend(keyword.value for keyword in value.keywords)
        elif isinstance(value, ast.Name):
            # (`dl = train_loader` in one branch, `dl = dev_loader` in the other: either.)
            containers = (ast.Dict, ast.DictComp, ast.Call, ast.Name)
            work.extend(each for each in bound.get(value.id, []) if isinstance(each, containers))
            if any(isinstance(each, ast.Dict) for each in bound.get(value.id, [])):
                work.extend(stored.get(value.id, []))
    return parts


def _bound_and_stored(source: Source) -> tuple[dict[str, list[ast.expr]], dict[str, list[ast.expr]]]:
    """What each plain name is bound to (`loaders = {}`), and what is stored into it by key
    (`loaders[split] = dl`)."""
    bound: dict[str, list[ast.expr]] = {}
    stored: dict[str, list[ast.expr]] = {}
    for node in ast_walk.walk(source.tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    bound.setdefault(target.id, []).append(node.value)
                elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
                    stored.setdefault(target.value.id, []).append(node.value)
    return bound, stored


def _loader_handed_on(source: Source, sampler: ast.Call, names: list[str]) -> bool:
    """The loader built with the sampler is handed to a function or class imported from
    another module (the project's Trainer): that module sets the epoch where it iterates it."""
    built = _loaders_built_with(source, sampler, names) | _given_the_sampler(source, sampler, names)
    dicts = _dicts_holding(source, built)
    elsewhere = source.imported_from_elsewhere | _objects_of_imported_classes(source)
    for call in source.calls:
        parent = source.parents.get(call)
        if isinstance(parent, (ast.For, ast.comprehension)) and parent.iter is call:
            continue  # `for x, y in tqdm.tqdm(loader)`: the pass starts here, not elsewhere
        root = call.func
        while isinstance(root, (ast.Attribute, ast.Call)):
            root = root.value if isinstance(root, ast.Attribute) else root.func
        if isinstance(root, ast.Name) and root.id in elsewhere and any(
                loose_dotted(arg) in built | dicts or _built_here_with(source, arg, sampler, names)
                or isinstance(arg, ast.Dict) and any(loose_dotted(each) in built for each in arg.values)
                for arg in [*call.args, *(k.value for k in call.keywords)]):
            return True
    return False


def _given_the_sampler(source: Source, sampler: ast.Call, names: list[str]) -> set[str]:
    """Names bound to a call given `sampler=` the sampler: a loader of a DataLoader subclass
    of another module (`tr_loader = AudioDataLoader(dataset, sampler=tr_sampler)`)."""
    built: set[str] = set()
    for node in ast_walk.walk(source.tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and any(
                keyword.arg == "sampler" and any(each is sampler or loose_dotted(each) in names
                                                 for each in ast_walk.walk(keyword.value))
                for keyword in node.value.keywords):
            built.update(loose_dotted(target) or "" for target in node.targets)
    return built


def _dicts_holding(source: Source, built: set[str]) -> set[str]:
    """Rule (the self-check's own reading): a name bound to a dict literal one of whose values
    is such a loader (`data = {"tr_loader": tr_loader, ...}`) hands that loader on with it when
    it is passed to another module (`Solver(data, model, optimizer, args)`)."""
    return {target.id for node in ast_walk.statements(source.tree) if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Dict) and any(loose_dotted(each) in built for each in node.value.values)
            for target in node.targets if isinstance(target, ast.Name)}


def _built_here_with(source: Source, value: ast.AST, sampler: ast.Call, names: list[str]) -> bool:
    """`train(model, DataLoader(data, sampler=train_sampler))`: the loader built in the call."""
    given = _sampler_argument(value) if isinstance(value, ast.Call) and value in loader_calls(source) else None
    return given is not None and any(each is sampler or loose_dotted(each) in names for each in ast_walk.walk(given))


def _objects_of_imported_classes(source: Source) -> set[str]:
    """`simclr = SimCLR(...)` of a class imported from another module: `simclr.train(loader)`
    hands the loader to that module too."""
    return {target.id for node in ast_walk.statements(source.tree) if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)
            and node.value.func.id in source.imported_from_elsewhere
            for target in node.targets if isinstance(target, ast.Name)}


def _loaders_built_with(source: Source, sampler: ast.Call, names: list[str]) -> set[str]:
    built: set[str] = set()
    for node in ast_walk.walk(source.tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and node.value in loader_calls(source):
            value = _sampler_argument(node.value)
            if value is not None and any(each is sampler or loose_dotted(each) in names
                                         for each in ast_walk.walk(value)):
                built.update(loose_dotted(target) or "" for target in node.targets)
    return built


def _loader_kept_on_the_object(source: Source, sampler: ast.Call, names: list[str]) -> bool:
    """The loader built with the sampler is kept on the object (`self.train = DataLoader(...)`
    in a data holder's __init__) and no loop of this module goes over it: the module that
    holds the object starts the passes (`for batch in dataset.train`), and sets the epoch there."""
    kept = {name for name in _loaders_built_with(source, sampler, names) if name.startswith("self.")}
    iterated = {loose_dotted(node.iter) for node in ast_walk.walk(source.tree) if isinstance(node, ast.For)}
    return bool(kept) and not kept & iterated


def _given_to_own_init(source: Source, names: list[str]) -> bool:
    """The sampler is the one a DataLoader subclass hands to `super().__init__(sampler=...)`:
    the instance is the loader, and whoever iterates it sets the epoch (in this module or in
    the one that builds it)."""
    for call in source.calls:
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr == "__init__" and isinstance(func.value, ast.Call) \
                and isinstance(func.value.func, ast.Name) and func.value.func.id == "super" and any(
                    keyword.arg == "sampler" and loose_dotted(keyword.value) in names for keyword in call.keywords):
            return True
    return False


def _given_to_a_loader(source: Source, sampler: ast.Call, names: list[str]) -> bool:
    for loader in loader_calls(source):
        value = _sampler_argument(loader)
        if value is not None and any(node is sampler or loose_dotted(node) in names for node in ast_walk.walk(value)):
            return True
    return False
