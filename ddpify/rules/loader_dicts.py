"""DataLoaders kept in a dict by key (`{split: DataLoader(...) for split in ["train", "val"]}`,
a dict literal, `dict(train=...)`, or `{"train": train_loader, ...}`): the entries that train
get a DistributedSampler where they are built (inline in the dict, or the data rule's named
sampler for a loader built by name), the others stay whole (DDP201, DDP203, DDP218).

An entry's role is what the loop does with it: the keys whose branch calls backward() or
step() (`if phase == "train":`) train, whatever they are called. An evaluation entry stays
whole on every rank rather than taking evaluation.py's shard: one loop runs every phase on
the same sums (running_loss, running_corrects), so, whole, the evaluation figures are the
original's as they stand, and every rank takes the same best-model decision from them
without a collective. Only the training phase's sums are all-reduced, under the key test
(training.py, `partly_sharded_loops`). The price is every rank evaluating the whole split.
"""
from collections.abc import Sequence
from typing import Optional, cast

import libcst as cst

from ddpify.analysis.control import Facts, keys_where
from ddpify.analysis.facts import BlockItem, DictPass, LoaderDict, Statement
from ddpify.analysis.names import trains_by_look
from ddpify.analysis.nodes import (
    calls_within,
    dotted_name,
    is_false,
    keyword_args,
    names_in,
    positional_args,
    returned_name,
    returns_in,
    string_value,
    target_names,
)
from ddpify.analysis.values import literal_entry
from ddpify.diagnostics import Rule, Severity
from ddpify.emit.edits import Edits, Insertion
from ddpify.emit.layout import fits
from ddpify.plan import Plan
from ddpify.rules import data
from ddpify.rules.cases import TRAINING, Emits, Silent
from ddpify.rules.epochs import (
    SET_EPOCH_EXTERNAL_CODE,
    SET_EPOCH_VIA_LOADER_CODE,
    SHARDED_THERE,
    epoch_parameter,
    runs_again,
)

RULES = (
    Rule("DDP218", Severity.WARNING, "DataLoader built inside a dict or list: not sharded",
         "ddpify shards the training entries of a dict of loaders built in one place (a "
         "comprehension over literal keys, a dict literal, dict(...)) when it can tell from "
         "the loops which keys train; the message says what stopped it here, and every rank "
         "would train on the whole dataset.",
         "Build the training loader by name (train_loader = DataLoader(..., sampler=train_sampler)), "
         "or pass sampler=DistributedSampler(...) for the training entry by hand."),
)

SUMMARY = "DataLoader built inside a dict or list: not sharded"
# Where the setup's `distributed` is out of scope (a dict built in a helper function).
OUT_OF_SETUP_CONDITION = "dist.is_initialized()"
SET_EPOCH_CODE = "if distributed:\n{lines}"
SAMPLER_CODE = "DistributedSampler({dataset}, shuffle={shuffle})"


def plan(facts: Facts, edits: Edits, setup: Plan) -> None:
    followed: set[cst.Call] = set()
    for loaders in facts.loader_dicts():
        passes = facts.dict_passes(loaders)
        if passes or _entries_handed_to_training(facts, loaders.function, loaders.name):
            # (passes a string, too: what stopped _plan_dict)
            _plan_dict(facts, edits, setup, loaders)
            followed.update(loaders.entries.values())  # this module's loops decide (above)
        elif _handed_out_of_module(facts, loaders):
            _plan_handed_out(facts, edits, setup, loaders)
            followed.update(loaders.entries.values())
    _report_handed_out(facts, edits, setup, followed)
    _plan_received(facts, edits, setup)
    _report_whole_entries_trained(facts, edits)


def _report_handed_out(facts: Facts, edits: Edits, setup: Plan, followed: set[cst.Call]) -> None:
    """A training DataLoader that a function hands out without a name: in the tuple or dict it
    returns (`return DataLoader(a), DataLoader(b)`, `return {"train": DataLoader(...)}`, or
    `loaders = {...}` then `return loaders`). No loop of this module goes over it, so no rule
    here gives it a sampler, and the code that loops over it (often another module) cannot
    reach its call: left as it is and reported (DDP218) rather than every rank training on the
    whole set. Its
    role is read from its key, its dataset's name and its shuffle, as for a named loader
    with no loop in sight (control.is_training_loader)."""
    named = {loader.call for loader in facts.loaders}
    for call in facts.loader_calls:
        if call in named or call in followed or facts.function_of(call) is None:
            continue
        holder = _handed_out_by(facts, call)
        parent = facts.parents.get(call)
        key = string_value(parent.key) if isinstance(parent, cst.DictElement) else None
        if holder is None or not _trains_by_look(call, key):
            continue
        returned = _returned_sequence(facts, call)
        if returned is not None:
            reason = _why_call_not_sharded(facts, edits, call, "the training loader")
            if reason is None:
                _shard_returned_sequence(facts, edits, setup, *returned)
                followed.update(calls_within(returned[1]))  # (the tuple's other loaders: done)
                continue
            edits.report("DDP218", call, f"{SUMMARY}: {reason}")
            continue
        edits.report("DDP218", call, (
            f"{SUMMARY}: {holder} hands it out without a name, and ddpify follows a loader out of "
            "its function only by name: build the training loader by name "
            "(train_loader = DataLoader(...)) and return the names (return train_loader, val_loader)"))


def _returned_sequence(facts: Facts, call: cst.Call) -> Optional[tuple[Statement, cst.BaseExpression]]:
    """`return DataLoader(train_set, ...), DataLoader(val_set, ...)` (a tuple or list of
    calls) in a function that nothing in this module calls, or that this module calls only to
    unpack it into names (facts.tuple_loader_factories): its statement and the tuple. The
    module that calls it unpacks the loaders into names, which it follows (ExternalLoader)."""
    sequence = facts.parents.get(facts.parents.get(call) or call)
    statement = facts.parents.get(sequence) if isinstance(sequence, (cst.Tuple, cst.List)) else None
    function = facts.function_of(call)
    if not isinstance(statement, cst.Return) or function is None or (
            facts.calls_of(function) and function not in facts.tuple_loader_factories):
        return None
    line = facts.statement_of(statement)
    return (line, cast(cst.BaseExpression, sequence)) if isinstance(line, cst.SimpleStatementLine) else None


def _shard_returned_sequence(facts: Facts, edits: Edits, setup: Plan, statement: Statement,
                             sequence: cst.BaseExpression) -> None:
    """The loaders of a returned tuple whose loops are in another module: by look, as for a
    named loader returned (control.is_training_loader), the training ones get a sampler under
    `dist.is_initialized()`; the others go whole to the code that evaluates them."""
    calls = [element.value for element in cast(cst.Tuple, sequence).elements
             if isinstance(element.value, cst.Call) and element.value in facts.loader_calls]
    trained = [call for call in calls if _trains_by_look(call, None)]
    if any(_why_call_not_sharded(facts, edits, call, "the training loader") is not None for call in trained):
        return
    condition = "distributed" if setup.sees_setup(facts, sequence) else OUT_OF_SETUP_CONDITION
    if condition == OUT_OF_SETUP_CONDITION:
        edits.imports.add("dist")
    _rewrite(facts, edits, statement, sequence, {call: _arguments(edits, call, condition) for call in trained})
    edits.imports.add("DistributedSampler")
    for call in calls:
        if call in trained:
            edits.report("DDP201", call)
            edits.report("DDP206", call)
        else:
            edits.report("DDP203", call, "evaluation loader left unsharded: it does not look like training "
                         "data (its dataset and shuffle), and goes whole to the code that evaluates it, which "
                         "takes this rank's share there when it can gather the figures")


def _handed_out_by(facts: Facts, call: cst.Call) -> Optional[str]:
    """What hands the loader out of its function: the return statement it sits in, or the
    tuple, list or dict literal assigned to a name that the function returns."""
    function = facts.function_of(call)
    child: cst.CSTNode = call
    parent = facts.parents.get(call)
    while parent is not None and isinstance(parent, (cst.Element, cst.DictElement, cst.Tuple, cst.List,
                                                     cst.Dict, cst.StarredElement)):
        child, parent = parent, facts.parents.get(parent)
    if child is call:
        return None  # an argument, a call's value: another rule's
    if isinstance(parent, cst.Return):
        return f"`return` in `{function.name.value}()`" if function is not None else None
    if isinstance(parent, cst.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0].target, cst.Name):
        name = parent.targets[0].target.value
        if function is not None and any(
                node.value is not None and name in target_names(node.value) for node in returns_in(function)):
            return f"`{name}`, returned by `{function.name.value}()`,"
    return None


def _trains_by_look(call: cst.Call, key: Optional[str], key_variable: Optional[str] = None) -> bool:
    """A `train` key or dataset name, or a shuffle on; an evaluation word says no. A
    comprehension's `shuffle=split == "train"` is read for the key. (returned_loaders.py reads
    the same decision with `ast` for the module that loops over the dict.)"""
    dataset = _dataset(call)
    words = " ".join(word for word in (key, dotted_name(dataset) if dataset is not None else None) if word)
    shuffle = keyword_args(call).get("shuffle")
    if shuffle is not None and key is not None and key_variable is not None \
            and key_variable in names_in(shuffle.value):
        keys = keys_where(shuffle.value, key_variable, {key}, True)
        if keys is not None:
            return trains_by_look(words, key in keys)
    return trains_by_look(words, _shuffles(call))


def _plan_dict(facts: Facts, edits: Edits, setup: Plan, loaders: LoaderDict) -> None:
    if any(facts.loops_over_values(facts.loader_holders_of(loader)) for loader in loaders.named.values()):
        return  # a loader also iterated by its own name: the data rule's, as any other
    if loaders.filled_by is not None:
        if facts.loops_over_values(facts.loader_holders_of(loaders.filled_by)):
            return
        # `dl = DataLoader(...)` then `loaders[split] = dl`: an entry of the dict, not a loader
        # of its own for the data rule (which would shard every split).
        setup.loaders_in_dicts.append(loaders.filled_by)
    passes = facts.dict_passes(loaders)
    if isinstance(passes, str):
        _report(facts, edits, setup, loaders, passes)
        return
    trained: set[str] = set()
    for each in passes:
        keys = facts.keys_trained(each)
        if isinstance(keys, str):
            _report(facts, edits, setup, loaders, keys)
            return
        trained |= keys
    # Rule: an entry by literal key handed to a function of another module of the project that
    # trains (`utils.train_epoch(loaders["train"], model, ...)`) trains, as a loader handed there
    # by name does: that module's loops sum their figures under the sampler test (library mode).
    handed = [(call, holder, key) for call, holder, key in
              _entries_handed_to_training(facts, loaders.function, loaders.name) if key in loaders.entries]
    trained |= {key for _, _, key in handed}
    if not trained:
        return  # evaluation only: evaluation.py's concern, not a training feed
    reason = _why_not_sharded(facts, edits, setup, loaders, trained)
    if reason is not None:
        _report(facts, edits, setup, loaders, reason)
        return
    _shard(facts, edits, setup, loaders, passes, trained, handed)


def _report(facts: Facts, edits: Edits, setup: Plan, loaders: LoaderDict, reason: str) -> None:
    """Left single-process as before, with what stopped the migration. A dict of loaders
    built by name stays the data rule's, as before."""
    if loaders.named:
        return
    first = min(loaders.entries.values(), key=facts.start_of)
    loops = facts.loops_over_values(facts.holders_from(loaders.function, loaders.name))
    fed = {loop for loop in facts.training_loops
           if loop in loops or any(outer in loops for outer in facts.enclosing_loops(loop))}
    if not fed:
        return
    setup.hand_made_batches.append(edits.report("DDP218", first, f"{SUMMARY}: {reason}"))
    setup.loader_dict_loops.update(fed)


def _why_not_sharded(facts: Facts, edits: Edits, setup: Plan, loaders: LoaderDict,
                     trained: set[str]) -> Optional[str]:
    outer = facts.enclosing_loops(loaders.value)
    if outer and loaders.value in loaders.entries.values() and isinstance(outer[0].target, cst.Name) \
            and outer[0].target.value == loaders.key_variable:
        outer = outer[1:]  # (the loop over the keys that fills it a key a pass)
    if outer:
        return f"`{loaders.name}` is built anew inside a loop"
    if not isinstance(loaders.statement, cst.SimpleStatementLine):
        return f"`{loaders.name}` is not built by an assignment"
    for key in [key for key in loaders.entries if key in trained]:  # the dict's order, not the set's
        named = loaders.named.get(key)
        if named is not None:
            if not data.can_shard(facts, setup, named):
                return f"the `{key}` loader, `{named.name}`, cannot be given a sampler"
            continue
        reason = _why_call_not_sharded(facts, edits, loaders.entries[key], f"the `{key}` loader")
        if reason is not None:
            return reason
    return None


def _why_call_not_sharded(facts: Facts, edits: Edits, call: cst.Call, shown: str) -> Optional[str]:
    """What stops an inline sampler in a DataLoader call built in a dict, tuple or list."""
    if edits.options.keep_global_batch:
        return "--keep-global-batch does not divide the batch size of a loader built in a dict or tuple"
    keywords = keyword_args(call)
    dataset = _dataset(call)
    if "sampler" in keywords or "batch_sampler" in keywords:
        return f"{shown} has a sampler of its own"
    if any(arg.star for arg in call.args):
        return f"{shown} takes arguments from `*` or `**`"
    if isinstance(call.func, cst.Name) and not facts.loader_classes.get(call.func.value, True):
        return f"`{call.func.value}` takes no sampler"
    if dataset is None or not _plain(dataset):
        what = "no dataset" if dataset is None else f"its dataset `{edits.code(dataset)}` built in the call"
        return f"{shown} has {what}: name the dataset first"
    return None


def _dataset(call: cst.Call) -> Optional[cst.BaseExpression]:
    keyword = keyword_args(call).get("dataset")
    if keyword is not None:
        return keyword.value
    positional = positional_args(call)
    return positional[0] if positional else None


def _plain(node: cst.BaseExpression) -> bool:
    """A name, attribute or subscript by literal or name: cheap to read twice, the same both
    times (the sampler needs the dataset too)."""
    if isinstance(node, (cst.Name, cst.SimpleString, cst.Integer)):
        return True
    if isinstance(node, cst.Attribute):
        return _plain(node.value)
    if isinstance(node, cst.Subscript) and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
        return _plain(node.value) and _plain(node.slice[0].slice.value)
    return False


# --- a dict of loaders handed to another module, and one received from it ----------------------

def _handed_out_of_module(facts: Facts, loaders: LoaderDict) -> bool:
    """The dict leaves its function by `return` (itself, or the name it is bound to), and
    nothing in this module calls that function: another module of the project loops over it
    (`loaders = data.get_dataloaders(cfg)`), or nothing ddpify can see does."""
    function = loaders.function
    if function is None or facts.calls_of(function):
        return False
    return loaders.name == returned_name(function) or any(
        node.value is not None and loaders.name in target_names(node.value) for node in returns_in(function))


def _plan_handed_out(facts: Facts, edits: Edits, setup: Plan, loaders: LoaderDict) -> None:
    """A dict of loaders whose loops are in another module: no loop here tells which entries
    train, so, as for a loader built by name and returned (control.is_training_loader), the
    key and dataset name tell, then the shuffle (`_trains_by_look`). The training entries get
    a DistributedSampler under `dist.is_initialized()` (no group is joined in this module),
    the others stay whole for the code that evaluates them, which takes its share where it can
    gather the figures (evaluation.py). Entries built by name first are the data rule's, by
    their names. The module that loops over the dict sets the epochs (`_plan_received`), and
    reads the same decision (returned_loaders.py)."""
    built_here = [key for key in loaders.entries if key not in loaders.named]
    trained = {key for key in built_here if _trains_by_look(loaders.entries[key], key, loaders.key_variable)}
    if not trained:
        return
    reason = _why_not_sharded(facts, edits, setup, loaders, trained)
    if reason is not None:
        first = min((loaders.entries[key] for key in trained), key=facts.start_of)
        edits.report("DDP218", first, f"{SUMMARY}: {reason}")
        return
    _shard_built_here(facts, edits, setup, loaders, trained)
    shown = f"the dict `{_function_name(loaders)}()` returns"
    for key in built_here:
        if key not in trained:
            edits.report("DDP203", loaders.entries[key], "evaluation loader left unsharded: the "
                         f"`{key}` entry of {shown} does not look like training data (its key, dataset "
                         "and shuffle), and goes whole to the code that evaluates it, which takes this "
                         "rank's share there when it can gather the figures")
    setup.sharded_loader_dicts.append(loaders)


def _function_name(loaders: LoaderDict) -> str:
    return loaders.function.name.value if loaders.function is not None else loaders.name


def _plan_received(facts: Facts, edits: Edits, setup: Plan) -> None:
    """`loaders = data.get_dataloaders(cfg)`: a dict of loaders that another module of the
    project builds and shards by look (`_plan_handed_out` there). Here, where its entries are
    looped over (`for x, y in loaders["train"]`, `for phase in ...: loaders[phase]`) or handed
    to a function that trains (`train_one_epoch(model, loaders["train"])`, this module's or
    another's): each training entry's epoch is set at the top of the epoch loop around it, the
    sums of a pass over a sharded entry are the shard's (training.py all-reduces them), and a
    training pass over an entry that module leaves whole is reported (DDP218): every rank
    would train on all of it."""
    for received in facts.external_loader_dicts:
        # (Only its name, function and keys matter to dict_passes: no call here builds it.)
        at = cast(cst.Call, received.call)
        loaders = LoaderDict(received.name, at, cast(Statement, received.statement), received.function,
                             dict.fromkeys(received.sharded, at))
        passes = facts.dict_passes(loaders)
        if isinstance(passes, str):
            if any(received.sharded.values()):
                edits.report("DDP211", received.call, f"no epoch loop found for set_epoch: {passes}")
            continue
        trained: set[str] = set()
        for each in passes:
            keys = facts.keys_trained(each)
            if isinstance(keys, str):
                edits.report("DDP211", each.loop, f"no epoch loop found for set_epoch: {keys}")
                continue
            trained |= keys
        handed = _entries_handed_to_training(facts, received.function, received.name)
        trained |= {key for _, _, key in handed}
        whole = [key for key in received.sharded if key in trained and not received.sharded[key]]
        if whole:
            diagnostic = edits.report("DDP218", received.call, _whole_entry_trained(
                f"the `{whole[0]}` entry of `{received.name}` trains here, but", received.made_by))
            if not any(received.sharded[key] for key in trained):
                setup.hand_made_batches.append(diagnostic)
        sharded = [key for key in received.sharded if key in trained and received.sharded[key]]
        _note_received_passes(facts, setup, passes, set(sharded))
        if sharded:
            setup.sharded_loader_dicts.append(loaders)
            uses = [_use(each) for each in passes if facts.loop_trains(each.loop)]
            uses += [(call, None, holder, None) for call, holder, _ in handed]
            _set_epoch_at(facts, edits, setup, uses, sharded, received.call, received.statement)


def _report_whole_entries_trained(facts: Facts, edits: Edits) -> None:
    """`val_loader = loaders["val"]`, where `loaders` comes from another module that leaves
    that entry whole, then a training loop over `val_loader`: every rank would train on all
    of it (DDP218)."""
    for loader in facts.external_loaders:
        entry = facts.whole_entries.get(loader.name)
        if entry is None:
            continue
        loops = [loop for loop in facts.loops_over_values(facts.holders_from(loader.function, loader.name))
                 if facts.loop_trains(loop)]
        if loops:
            edits.report("DDP218", loops[0], _whole_entry_trained(f"`{loader.name}` is `{entry}`, and",
                                                                 loader.made_by))


def _whole_entry_trained(what: str, made_by: str) -> str:
    return (f"{SUMMARY}: {what} `{made_by}()` builds it as an evaluation loader (by its key, dataset and "
            "shuffle) and leaves it whole, so every rank would train on all of it: call the key `train` "
            "there, or give that entry sampler=DistributedSampler(...) by hand")


def _note_received_passes(facts: Facts, setup: Plan, passes: list[DictPass], sharded: set[str]) -> None:
    """The passes over entries of a dict another module builds: a shard when that module gave
    the entry a DistributedSampler, which the pass's figures are summed under (the entry's
    key and shuffle decided it there, by look)."""
    for each in passes:
        setup.loader_dict_loops.add(each.loop)
        if not facts.loop_trains(each.loop) or not sharded & set(each.keys):
            continue
        key = each.key_variable if each.key_variable is not None else _quoted(each.keys[0])
        loader = f"{each.holder}[{key}]"
        if each.handed_by is not None:
            # `train(model, optimizer, dataloader)` handed the entry: inside, the dict is out of
            # sight, and the loop's own loader (its parameter) is the entry.
            loader = dotted_name(_iterated_loader(each.loop)) or loader
        setup.partly_sharded_loops.setdefault(each.loop, SHARDED_THERE.format(loader=loader))


def _iterated_loader(loop: cst.For) -> cst.BaseExpression:
    """`enumerate(dataloader)`, `tqdm(loader)`: the loader the wrappers go over."""
    iterated = loop.iter
    while isinstance(iterated, cst.Call) and iterated.args and not iterated.args[0].star:
        iterated = iterated.args[0].value
    return iterated


def _entries_handed_to_training(facts: Facts, function: Optional[cst.FunctionDef], name: str
                                ) -> list[tuple[cst.Call, str, str]]:
    """`engine.train_one_epoch(model, loaders["train"], ...)`: an entry by literal key of the
    dict `name` holds in `function`, handed to a function of another module of the project that
    trains, or a Trainer built with it: (the call, the dict's name there, the key)."""
    found: list[tuple[cst.Call, str, str]] = []
    holders = facts.holders_from(function, name)
    for call in [*facts.training_helper_calls, *facts.training_constructors]:
        for arg in call.args:
            value = arg.value
            holder = dotted_name(value.value) if isinstance(value, cst.Subscript) and not arg.star else None
            key = literal_entry(value, holder) if holder is not None else None
            if key is not None and holder is not None and any(
                    held == holder and facts.sees_value(call, holder, function) for function, held in holders):
                found.append((call, holder, key))
    return found


# --- the edits -------------------------------------------------------------------------------------

def _shard(facts: Facts, edits: Edits, setup: Plan, loaders: LoaderDict, passes: list[DictPass],
           trained: set[str], handed: Sequence[tuple[cst.Call, str, str]] = ()) -> None:
    _shard_built_here(facts, edits, setup, loaders, trained)
    for key, loader in loaders.named.items():
        setup.loaders_in_dicts.append(loader)
        if key in trained:
            data.add_sampler(facts, edits, loader, setup, epoch=False)
    looped = {key for each in passes for key in each.keys}
    for key in loaders.entries:
        if key in trained:
            continue
        if key in looped or not handed:
            edits.report("DDP203", loaders.entries[key], "evaluation loader left unsharded: the "
                         f"`{key}` entry of `{loaders.name}` does not train, and every rank evaluates "
                         "all of it, so its figures are the original's")
        else:
            edits.report("DDP203", loaders.entries[key], "evaluation loader left unsharded: the "
                         f"`{key}` entry of `{loaders.name}` does not train here, and goes whole to the "
                         "code that evaluates it, which takes this rank's share there when it can "
                         "gather the figures")
    setup.sharded_loader_dicts.append(loaders)
    _note_passes(facts, edits, setup, passes, trained)
    shuffled = [key for key in loaders.entries if key in trained and (
        _shuffles(loaders.entries[key]) if key not in loaders.named
        else loaders.named[key].shuffles or loaders.named[key].kwargs_name is not None)]
    if shuffled:
        _set_epoch(facts, edits, setup, loaders, passes, shuffled, handed)


def _shard_built_here(facts: Facts, edits: Edits, setup: Plan, loaders: LoaderDict, trained: set[str]) -> None:
    """The training loaders built in the dict itself: an inline sampler in their call."""
    keys = [key for key in loaders.entries if key not in loaders.named]
    calls = list(dict.fromkeys(loaders.entries[key] for key in keys if key in trained))
    if not calls:
        return
    condition = "distributed"
    if not setup.sees_setup(facts, loaders.value):
        condition = OUT_OF_SETUP_CONDITION
        edits.imports.add("dist")
    if loaders.key_variable is not None and set(keys) - trained:
        # One call builds every entry: only the training keys get the sampler.
        condition = f"{condition} and {_key_test(loaders.key_variable, [k for k in keys if k in trained])}"
    _rewrite(facts, edits, loaders.statement, loaders.value,
             {call: _arguments(edits, call, condition) for call in calls})
    edits.imports.add("DistributedSampler")
    for call in calls:
        edits.report("DDP201", call)
        edits.report("DDP206", call)


def _note_passes(facts: Facts, edits: Edits, setup: Plan, passes: list[DictPass], trained: set[str]) -> None:
    """Which passes are a shard, whole or in part, for training.py to sum their figures."""
    for each in passes:
        setup.loader_dict_loops.add(each.loop)
        taken = [key for key in each.keys if key in trained]
        if not taken:
            continue
        if len(taken) == len(each.keys):
            setup.sharded_loops.append(each.loop)
        elif each.key_variable is not None:
            setup.partly_sharded_loops[each.loop] = _key_test(each.key_variable, taken)
        if not facts.loop_trains(each.loop):
            edits.report("DDP213", each.loop)


def _key_test(variable: str, keys: list[str]) -> str:
    if len(keys) == 1:
        return f"{variable} == {_quoted(keys[0])}"
    return f"{variable} in ({', '.join(_quoted(key) for key in keys)})"


def _quoted(key: str) -> str:
    return f'"{key}"' if '"' not in key and "\\" not in key else repr(key)


def _shuffles(call: cst.Call) -> bool:
    shuffle = keyword_args(call).get("shuffle")
    return shuffle is not None and not is_false(shuffle.value)


def _arguments(edits: Edits, call: cst.Call, condition: str) -> list[str]:
    """The call's arguments with `shuffle=` off where the sampler is on (DataLoader refuses
    both) and `sampler=` after it, or last."""
    dataset = _dataset(call)
    assert dataset is not None  # _why_not_sharded checked
    shuffle_arg = keyword_args(call).get("shuffle")
    shuffle = edits.code(shuffle_arg.value) if shuffle_arg is not None else "False"
    sampler = f"{SAMPLER_CODE.format(dataset=edits.code(dataset), shuffle=shuffle)} if {condition} else None"
    arguments: list[str] = []
    placed = False
    for arg in call.args:
        arguments.append(edits.code_edited(arg.with_changes(comma=cst.MaybeSentinel.DEFAULT)).strip())
        if arg is shuffle_arg:
            beside = _shuffle_unless(shuffle, condition)
            if beside is not None:
                arguments[-1] = f"shuffle={beside}"
            arguments.append(f"sampler={sampler}")
            placed = True
    if not placed:
        arguments.append(f"sampler={sampler}")
    return arguments


def _shuffle_unless(shuffle: str, condition: str) -> Optional[str]:
    """`shuffle=` beside an inline sampler: on only where the sampler is off."""
    if shuffle == "False":
        return None
    negated = f"not {condition}" if " " not in condition else f"not ({condition})"
    if shuffle == "True":
        return negated
    if " or " in shuffle or " if " in shuffle or "lambda" in shuffle:
        shuffle = f"({shuffle})"  # `and` would bind tighter
    return f"{shuffle} and {negated}"


# --- layout, as black writes it ----------------------------------------------------------------------

def _rewrite(facts: Facts, edits: Edits, statement: Statement, value: cst.BaseExpression,
             arguments: dict[cst.Call, list[str]]) -> None:
    column = facts.positions[statement].start.column
    one_line = facts.positions[statement].start.line == facts.positions[statement].end.line
    if one_line:
        grown = sum(len(_call(edits, call, args)) - len(edits.code(call)) for call, args in arguments.items())
        line = facts.module.code.splitlines()[facts.line_of(statement) - 1]
        rebuilt = _rebuilt_statement(edits, statement, value, arguments, column)
        if not fits(0, line.rstrip() + " " * grown) and rebuilt is not None:
            edits.replace(statement, [edits.statement(rebuilt).with_changes(
                leading_lines=statement.leading_lines)])
            return
    for call, args in arguments.items():
        source_line = facts.module.code.splitlines()[facts.line_of(call) - 1]
        indent = len(source_line) - len(source_line.lstrip())
        text = _call(edits, call, args)
        if not fits(facts.positions[call].start.column, text):
            text = _exploded(edits, call, args, indent - column, indent)
        edits.expressions[call] = _replaced_by(edits, text)


def _replaced_by(edits: Edits, text: str):
    def rewrite(_node: cst.Call) -> cst.BaseExpression:
        return edits.expression(text)
    return rewrite


def _call(edits: Edits, call: cst.Call, args: list[str]) -> str:
    return f"{edits.code(call.func)}({', '.join(args)})"


def _exploded(edits: Edits, call: cst.Call, args: list[str], indent: int, column: int) -> str:
    """The call over several lines; `indent` is relative to the statement, `column` is where
    the line starts on the page (for the line length)."""
    inner = " " * (indent + 4)
    joined = ", ".join(args)
    if fits(column + 4, joined):
        return f"{edits.code(call.func)}(\n{inner}{joined}\n{' ' * indent})"
    lines = [_argument_lines(arg, indent + 4, column + 4) for arg in args]
    return f"{edits.code(call.func)}(\n" + "".join(lines) + f"{' ' * indent})"


def _argument_lines(arg: str, indent: int, column: int) -> str:
    """One argument a line; a conditional too long for its line in parentheses, split."""
    pad = " " * indent
    if fits(column, arg + ",") or " if " not in arg or "=" not in arg.split("(", 1)[0]:
        return f"{pad}{arg},\n"
    keyword, value = arg.split("=", 1)
    body, rest = value.rsplit(" else ", 1)
    body, test = body.split(" if ", 1)
    inner = " " * (indent + 4)
    return f"{pad}{keyword}=(\n{inner}{body}\n{inner}if {test}\n{inner}else {rest}\n{pad}),\n"


def _rebuilt_statement(edits: Edits, statement: Statement, value: cst.BaseExpression,
                       arguments: dict[cst.Call, list[str]], column: int) -> Optional[str]:
    """`name = {...}` (or `return {...}`) split over lines as black splits it, the loaders'
    calls exploded."""
    assert isinstance(statement, cst.SimpleStatementLine)
    small = statement.body[0]
    if len(statement.body) != 1 or not isinstance(small, (cst.Assign, cst.Return)) or small.value is not value:
        return None
    head = f"{edits.code(small.targets[0].target)} = " if isinstance(small, cst.Assign) else "return "

    def entry(prefix: str, node: cst.BaseExpression) -> str:
        """`prefix` then the value, at one level in; a rebuilt call explodes if need be."""
        if not isinstance(node, cst.Call) or node not in arguments:
            return f"    {prefix}{edits.code(node)}"
        text = _call(edits, node, arguments[node])
        if fits(column + 4, prefix + text):
            return f"    {prefix}{text}"
        return f"    {prefix}{_exploded(edits, node, arguments[node], 4, column + 4)}"

    if isinstance(value, cst.DictComp):
        element = entry(f"{edits.code(value.key)}: ", value.value)
        clause = f"for {edits.code(value.for_in.target)} in {edits.code(value.for_in.iter)}"
        return f"{head}{{\n{element}\n    {clause}\n}}\n"
    if isinstance(value, cst.Dict):
        elements = [entry(f"{edits.code(element.key)}: ", element.value)
                    for element in value.elements if isinstance(element, cst.DictElement)]
        return f"{head}{{\n" + "".join(f"{line},\n" for line in elements) + "}\n"
    if isinstance(value, cst.Call) and value in arguments:  # `dl = DataLoader(...)`, an entry a pass
        text = _call(edits, value, arguments[value])
        if fits(column + len(head), text):
            return f"{head}{text}\n"
        return f"{head}{_exploded(edits, value, arguments[value], 0, column)}\n"
    if isinstance(value, cst.Call):
        elements = [entry(f"{arg.keyword.value}=", arg.value) for arg in value.args if arg.keyword is not None]
        return f"{head}{edits.code(value.func)}(\n" + "".join(f"{line},\n" for line in elements) + ")\n"
    return None


# --- set_epoch -----------------------------------------------------------------------------------------

def _set_epoch(facts: Facts, edits: Edits, setup: Plan, loaders: LoaderDict, passes: list[DictPass],
               shuffled: list[str], handed: Sequence[tuple[cst.Call, str, str]] = ()) -> None:
    """`loaders["train"].sampler.set_epoch(epoch)` at the top of each epoch loop around a
    training pass: the sampler has no name of its own, the loader carries it."""
    # An entry handed to a function (`train_one_epoch(model, loaders["train"])`, this module's
    # or another's) counts its epochs around that call, where the dict's name is in scope.
    uses = [_use(each) for each in passes if facts.loop_trains(each.loop)]
    uses += [(call, None, holder, None) for call, holder, _ in handed]
    _set_epoch_at(facts, edits, setup, uses, shuffled, loaders.entries[shuffled[0]])


# (where the epochs are counted around, the loop that picks the key, the dict's name there,
# the entry's own name and key there when it was handed on to a function by itself)
Use = tuple[cst.CSTNode, Optional[cst.For], str, Optional[tuple[str, str]]]


def _use(each: DictPass) -> Use:
    handed_as = (each.handed_as, each.keys[0]) if each.handed_as is not None else None
    return each.handed_by or each.loop, each.key_loop, each.holder, handed_as


def _set_epoch_at(facts: Facts, edits: Edits, setup: Plan, uses: Sequence[Use],
                  keys: list[str], report_at: cst.CSTNode, received: Optional[cst.CSTNode] = None) -> None:
    """set_epoch for the entries `keys` at the top of the epoch loop around each training use
    (a pass, or the call an entry is handed to), with the dict's name there, or the entry's own
    name in the function it was handed to (`train_dataloader.sampler.set_epoch(epoch)`).
    `received`: the statement that takes a dict another module builds, whose entries may have
    no DistributedSampler (made anew inside the epoch loop: its set_epoch follows it)."""
    placed: set[BlockItem] = set()
    for anchor, key_loop, holder, handed_as in uses:
        if handed_as is not None and handed_as[1] not in keys:
            continue
        found = _epoch_loop_around(facts, anchor, key_loop, holder)
        if found is None:
            edits.report("DDP211", report_at)
            return
        where, epoch = found
        if where in placed:
            continue
        placed.add(where)
        entries = [f"{holder}[{_quoted(key)}]" for key in keys] if handed_as is None else [handed_as[0]]
        # A function that runs its epochs again over the same dict (`train_model(model_ft, ...)`,
        # then `train_model(model_conv, ...)`) counts on from the sampler's epoch (epochs.runs_again).
        again = received is None and isinstance(where, cst.For) and runs_again(
            facts, where, facts.function_of(report_at))
        counts = {entry: f"{entry}.sampler.epoch + 1" if again else epoch for entry in entries}
        if received is not None:
            code = "".join(SET_EPOCH_EXTERNAL_CODE.format(loader=entry, epoch=epoch) for entry in entries)
            edits.imports.add("DistributedSampler")
        elif setup.sees_setup(facts, where) and handed_as is None:
            # (A loader handed in by name gets the sampler test: the function may be handed others.)
            code = SET_EPOCH_CODE.format(lines="".join(
                f"    {entry}.sampler.set_epoch({counts[entry]})\n" for entry in entries))
        else:
            code = "".join(SET_EPOCH_VIA_LOADER_CODE.format(loader=entry, epoch=counts[entry]) for entry in entries)
        if not isinstance(where, cst.For):
            # A pass in a method handed the epoch (`def _run_epoch(self, epoch)`): before it.
            edits.insert_before(where, Insertion(edits.statements(code)))
            edits.report("DDP202", where)
            continue
        made_inside = facts.ancestor_in(received, where.body) if received is not None else None
        if made_inside is not None:
            edits.insert_after(made_inside, edits.statements(code))
        else:
            edits.insert_before(where.body.body[0], Insertion(edits.statements(code)))
        edits.report("DDP202", where)


def _epoch_loop_around(facts: Facts, anchor: cst.CSTNode, key_loop: Optional[cst.For], holder: str
                       ) -> Optional[tuple[BlockItem, str]]:
    """Where the epochs of a training use of a dict entry are counted, and the epoch's name
    there: the loop around it (not the loop that picks the key); for a dict kept on `self`,
    else the loop around a call of the method (`for epoch ...: self._run_epoch(epoch)`); else,
    in a method handed the epoch as a parameter, the statement that starts the pass."""
    around = [loop for loop in facts.enclosing_loops(anchor) if loop is not key_loop]
    epoch_loop = next((loop for loop in around if isinstance(loop.target, cst.Name)), None)
    if epoch_loop is not None:
        return epoch_loop, cast(cst.Name, epoch_loop.target).value
    function = facts.function_of(anchor)
    if function is None:
        return None
    if isinstance(anchor, cst.Call) and (passes := facts.loops_around_passes_of(anchor)):
        # `runner = Runner(train_loader=loaders["train"])`, then `for epoch ...: runner.step()`.
        return passes[0], cast(cst.Name, passes[0].target).value
    if holder.startswith("self."):  # (the same attribute in the method that calls this one)
        for call in facts.calls_of(function):
            outer = next((loop for loop in facts.enclosing_loops(call) if isinstance(loop.target, cst.Name)), None)
            if outer is not None:
                return outer, cast(cst.Name, outer.target).value
    epoch = epoch_parameter(function)
    start = facts.ancestor_in(key_loop or anchor, function.body)
    if epoch is None or start is None or around:
        return None
    return start, epoch


_PHASES = TRAINING.replace(
    "loader = DataLoader(dataset, batch_size=8, shuffle=True)\n",
    'loaders = {split: DataLoader(dataset, batch_size=8, shuffle=True) for split in ("train", "val")}\n',
).replace("    for x, y in loader:\n", '    for phase in ("train", "val"):\n      for x, y in loaders[phase]:\n'
).replace("        loss.backward()\n        optimizer.step()\n",
          '        if phase == "train":\n            loss.backward()\n            optimizer.step()\n')

# The entry handed to the function that runs the epoch's batches, keyword or position.
_HANDED_ON = TRAINING.replace(
    "loader = DataLoader(dataset, batch_size=8, shuffle=True)\n",
    'loaders = {split: DataLoader(dataset, batch_size=8, shuffle=True) for split in ("train", "val")}\n\n\n'
    "def run(batches):\n    for x, y in batches:\n"
    "        loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))\n"
    "        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()\n    return loss\n\n\n",
).replace("""    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
""", '    loss = run(loaders["train"])\n')

# A dict literal returned to the one call site that names it; made anew each epoch, it is left.
_RETURNED = TRAINING.replace(
    "loader = DataLoader(dataset, batch_size=8, shuffle=True)\n",
    'def make_loaders():\n    return {"train": DataLoader(dataset, batch_size=8, shuffle=True)}\n\n\n'
    "loaders = make_loaders()\n",
).replace("    for x, y in loader:\n", '    for x, y in loaders["train"]:\n')

_FILLED_IN_A_LOOP = TRAINING.replace(
    "loader = DataLoader(dataset, batch_size=8, shuffle=True)\n",
    "loaders = {}\nfor split in [\"train\", \"val\"]:\n"
    "    loaders[split] = DataLoader(dataset, batch_size=8, shuffle=split == \"train\")\n",
).replace("    for x, y in loader:\n", "    for x, y in loaders[\"train\"]:\n")

_TUPLE_RETURNED = TRAINING.replace(
    "dataset = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))\n"
    "loader = DataLoader(dataset, batch_size=8, shuffle=True)\n",
    "\n\ndef make_loaders():\n    dataset = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))\n"
    "    return DataLoader(dataset, batch_size=8, shuffle=True), DataLoader(dataset, batch_size=8)\n\n\n"
    "loader, _ = make_loaders()\n")

CASES = (
    # A dict filled a key a pass of a loop over literal splits: the comprehension's dict.
    Emits(_FILLED_IN_A_LOOP, "DDP202", ('loaders["train"].sampler.set_epoch(epoch)',
                                        'if distributed and split == "train"')),
    Emits(_RETURNED, "DDP202", ('loaders["train"].sampler.set_epoch(epoch)', "DistributedSampler(dataset")),
    Silent(_RETURNED.replace("loaders = make_loaders()\n", "").replace(
        "for epoch in range(3):\n", "for epoch in range(3):\n    loaders = make_loaders()\n"), "DDP201"),
    Emits(_HANDED_ON, "DDP202", ('loaders["train"].sampler.set_epoch(epoch)', 'if distributed and split == "train"')),
    Emits(_HANDED_ON.replace('run(loaders["train"])', 'run(batches=loaders["train"])'), "DDP202",
          ('loaders["train"].sampler.set_epoch(epoch)',)),
    Emits(TRAINING.replace("loader = DataLoader(dataset, batch_size=8, shuffle=True)\n",
                           'loaders = {split: DataLoader(dataset, batch_size=8) for split in ("train", "val")}\n')
          .replace("in loader:", 'in loaders["train"]:'), "DDP201",
          ("DistributedSampler(dataset, shuffle=False)", 'if distributed and split == "train"')),
    Emits(_PHASES, "DDP201", ('shuffle=not (distributed and split == "train")',
                              'loaders["train"].sampler.set_epoch(epoch)')),
    Emits(_PHASES, "DDP203"),
    Emits(_PHASES.replace("      for x, y in loaders[phase]:\n",
                          "      total = 0.0\n      for x, y in loaders[phase]:\n")
          .replace("            optimizer.step()\n", "            optimizer.step()\n        total += loss.item()\n"
                   "      print(phase, total / len(loaders[phase]))\n"),
          "DDP402", ('if distributed and phase == "train":', "total = totals[0].item() / dist.get_world_size()")),
    Emits(_PHASES.replace('if phase == "train":', "if phase != \"val\":"), "DDP201"),
    Emits(_PHASES.replace('if phase == "train":', "if training:")
          .replace("for x, y in loaders[phase]:", 'training = phase == "train"\n      for x, y in loaders[phase]:'),
          "DDP203", ('if distributed and split == "train"',)),
    Emits(_PHASES.replace('if phase == "train":', 'if phase.startswith("tr"):'), "DDP218"),
    Silent(_PHASES.replace('if phase == "train":', 'if phase.startswith("tr"):'), "DDP201"),
    Emits(TRAINING.replace("loader = DataLoader(dataset, batch_size=8, shuffle=True)\n",
                           "loaders = dict(fit=DataLoader(dataset, batch_size=8, shuffle=True), "
                           "check=DataLoader(dataset, batch_size=8))\n")
          .replace("in loader:", "in loaders[\"fit\"]:"), "DDP203", ("shuffle=not distributed",)),
    Emits(TRAINING.replace("loader = DataLoader(dataset, batch_size=8, shuffle=True)\n",
                           'loaders = {split: DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), '
                           'batch_size=8) for split in ("train", "val")}\n')
          .replace("in loader:", 'in loaders["train"]:'), "DDP218"),
    # A function of the script returning a tuple of loaders, called only to unpack it: sharded
    # by look; kept whole (and reported) when a call keeps the tuple whole.
    Emits(_TUPLE_RETURNED, "DDP201", ("sampler.set_epoch(epoch)",)),
    Silent(_TUPLE_RETURNED.replace("loader, _ = make_loaders()\n", "loaders = make_loaders()\nloader = loaders[0]\n"),
           "DDP201"),
)
