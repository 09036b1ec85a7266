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
from typing import Optional

import libcst as cst

from ddpify.analysis.control import EVALUATION_WORDS, Facts
from ddpify.analysis.facts import DictPass, LoaderDict
from ddpify.analysis.nodes import dotted_name, is_false, keyword_args, positional_args, string_value
from ddpify.diagnostics import Rule, Severity
from ddpify.emit.edits import Edits, Insertion
from ddpify.emit.layout import fits
from ddpify.plan import Plan
from ddpify.rules import data
from ddpify.rules.cases import TRAINING, Emits, Silent
from ddpify.rules.epochs import SET_EPOCH_VIA_LOADER_CODE

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
        _plan_dict(facts, edits, setup, loaders)
        if facts.dict_passes(loaders):  # (a string, too: what stopped _plan_dict)
            followed.update(loaders.entries.values())  # this module's loops decide (above)
    _report_handed_out(facts, edits, followed)


def _report_handed_out(facts: Facts, edits: Edits, followed: set[cst.Call]) -> None:
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
        if holder is None or not _trains_by_look(facts, call):
            continue
        edits.report("DDP218", call, (
            f"{SUMMARY}: {holder} hands it out without a name, and ddpify follows a loader out of "
            "its function only by name: build the training loader by name "
            "(train_loader = DataLoader(...)) and return the names (return train_loader, val_loader)"))


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
                isinstance(node, cst.Return) and node.value is not None and name in _names_in(node.value)
                for node in _returns_of(function)):
            return f"`{name}`, returned by `{function.name.value}()`,"
    return None


def _returns_of(function: cst.FunctionDef) -> list[cst.Return]:
    found: list[cst.Return] = []

    class _Returns(cst.CSTVisitor):
        def visit_Return(self, node: cst.Return) -> None:
            found.append(node)

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is function  # not the returns of a function defined inside

    function.visit(_Returns())
    return found


def _names_in(node: cst.BaseExpression) -> set[str]:
    if isinstance(node, cst.Name):
        return {node.value}
    if isinstance(node, (cst.Tuple, cst.List)):
        return {name for element in node.elements for name in _names_in(element.value)}
    return set()


def _trains_by_look(facts: Facts, call: cst.Call) -> bool:
    """A `train` key or dataset name, or a shuffle on; an evaluation word says no."""
    parent = facts.parents.get(call)
    key = string_value(parent.key) if isinstance(parent, cst.DictElement) else None
    dataset = _dataset(call)
    words = " ".join(word for word in (key, dotted_name(dataset) if dataset is not None else None) if word).lower()
    if "train" in words:
        return True
    if any(word in words for word in EVALUATION_WORDS):
        return False
    return _shuffles(call)


def _plan_dict(facts: Facts, edits: Edits, setup: Plan, loaders: LoaderDict) -> None:
    if any(facts.loops_over_values(facts.loader_holders_of(loader)) for loader in loaders.named.values()):
        return  # a loader also iterated by its own name: the data rule's, as any other
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
    if not trained:
        return  # evaluation only: evaluation.py's concern, not a training feed
    reason = _why_not_sharded(facts, edits, setup, loaders, trained)
    if reason is not None:
        _report(facts, edits, setup, loaders, reason)
        return
    _shard(facts, edits, setup, loaders, passes, trained)


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
    if facts.enclosing_loops(loaders.value):
        return f"`{loaders.name}` is built anew inside a loop"
    if not isinstance(loaders.statement, cst.SimpleStatementLine):
        return f"`{loaders.name}` is not built by an assignment"
    for key in [key for key in loaders.entries if key in trained]:  # the dict's order, not the set's
        named = loaders.named.get(key)
        if named is not None:
            if not data.can_shard(facts, setup, named):
                return f"the `{key}` loader, `{named.name}`, cannot be given a sampler"
            continue
        if edits.options.keep_global_batch:
            return "--keep-global-batch does not divide the batch size of a loader built in a dict"
        call = loaders.entries[key]
        keywords = keyword_args(call)
        dataset = _dataset(call)
        if "sampler" in keywords or "batch_sampler" in keywords:
            return f"the `{key}` loader has a sampler of its own"
        if any(arg.star for arg in call.args):
            return f"the `{key}` loader takes arguments from `*` or `**`"
        if isinstance(call.func, cst.Name) and not facts.loader_classes.get(call.func.value, True):
            return f"`{call.func.value}` takes no sampler"
        if dataset is None or not _plain(dataset):
            what = "no dataset" if dataset is None else f"its dataset `{edits.code(dataset)}` built in the call"
            return f"the `{key}` loader has {what}: name the dataset first"
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


# --- the edits -------------------------------------------------------------------------------------

def _shard(facts: Facts, edits: Edits, setup: Plan, loaders: LoaderDict, passes: list[DictPass],
           trained: set[str]) -> None:
    _shard_built_here(facts, edits, setup, loaders, trained)
    for key, loader in loaders.named.items():
        setup.loaders_in_dicts.append(loader)
        if key in trained:
            data.add_sampler(facts, edits, loader, setup, epoch=False)
    for key in loaders.entries:
        if key not in trained:
            edits.report("DDP203", loaders.entries[key], "evaluation loader left unsharded: the "
                         f"`{key}` entry of `{loaders.name}` does not train, and every rank evaluates "
                         "all of it, so its figures are the original's")
    setup.sharded_loader_dicts.append(loaders)
    _note_passes(facts, edits, setup, passes, trained)
    shuffled = [key for key in loaders.entries if key in trained and (
        _shuffles(loaders.entries[key]) if key not in loaders.named
        else loaders.named[key].shuffles or loaders.named[key].kwargs_name is not None)]
    if shuffled:
        _set_epoch(facts, edits, setup, loaders, passes, shuffled)


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
    _rewrite(facts, edits, loaders, {call: _arguments(edits, call, condition) for call in calls})
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
        arguments.append(edits.code(arg.with_changes(comma=cst.MaybeSentinel.DEFAULT)).strip())
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

def _rewrite(facts: Facts, edits: Edits, loaders: LoaderDict, arguments: dict[cst.Call, list[str]]) -> None:
    statement = loaders.statement
    column = facts.positions[statement].start.column
    one_line = facts.positions[statement].start.line == facts.positions[statement].end.line
    if one_line:
        grown = sum(len(_call(edits, call, args)) - len(edits.code(call)) for call, args in arguments.items())
        line = facts.module.code.splitlines()[facts.line_of(statement) - 1]
        rebuilt = _rebuilt_statement(edits, loaders, arguments, column)
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


def _rebuilt_statement(edits: Edits, loaders: LoaderDict, arguments: dict[cst.Call, list[str]],
                       column: int) -> Optional[str]:
    """`name = {...}` split over lines as black splits it, the loaders' calls exploded."""
    statement = loaders.statement
    assert isinstance(statement, cst.SimpleStatementLine)
    small = statement.body[0]
    if len(statement.body) != 1 or not isinstance(small, cst.Assign) or small.value is not loaders.value:
        return None
    head = f"{edits.code(small.targets[0].target)} = "
    value = loaders.value

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
    if isinstance(value, cst.Call):
        elements = [entry(f"{arg.keyword.value}=", arg.value) for arg in value.args if arg.keyword is not None]
        return f"{head}{edits.code(value.func)}(\n" + "".join(f"{line},\n" for line in elements) + ")\n"
    return None


# --- set_epoch -----------------------------------------------------------------------------------------

def _set_epoch(facts: Facts, edits: Edits, setup: Plan, loaders: LoaderDict, passes: list[DictPass],
               shuffled: list[str]) -> None:
    """`loaders["train"].sampler.set_epoch(epoch)` at the top of each epoch loop around a
    training pass: the sampler has no name of its own, the loader carries it."""
    placed: set[cst.For] = set()
    for each in passes:
        if not facts.loop_trains(each.loop):
            continue
        # An entry handed to a function (`train_one_epoch(model, loaders["train"])`) counts its
        # epochs around that call, where the dict's name is in scope.
        around = [loop for loop in facts.enclosing_loops(each.handed_by or each.loop) if loop is not each.key_loop]
        epoch_loop = next((loop for loop in around if isinstance(loop.target, cst.Name)), None)
        if epoch_loop is None:
            edits.report("DDP211", loaders.entries[shuffled[0]])
            return
        if epoch_loop in placed:
            continue
        placed.add(epoch_loop)
        epoch = epoch_loop.target.value if isinstance(epoch_loop.target, cst.Name) else "epoch"
        entries = [f"{each.holder}[{_quoted(key)}]" for key in shuffled]
        if setup.sees_setup(facts, epoch_loop):
            code = SET_EPOCH_CODE.format(lines="".join(
                f"    {entry}.sampler.set_epoch({epoch})\n" for entry in entries))
        else:
            code = "".join(SET_EPOCH_VIA_LOADER_CODE.format(loader=entry, epoch=epoch) for entry in entries)
        edits.insert_before(epoch_loop.body.body[0], Insertion(edits.statements(code)))
        edits.report("DDP202", epoch_loop)


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

CASES = (
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
)
