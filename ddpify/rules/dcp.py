"""FSDP2 with `--checkpoint dcp`: the script's checkpoint files become Distributed Checkpoints
(DDP313), written and read by every rank, each its own shards.

sharding.py finds the calls that take or load the model's and optimizer's state dicts after
the shard; this unit turns the torch.save that writes them into dcp.save and the torch.load
that reads them back into dcp.load, at the same path, which names a folder from then on.
Only the shapes it can follow end to end are converted: the state dicts saved directly or
through a dict assigned just before, and a load whose result is read by string keys (or
handed whole to load_state_dict). Anything else would leave a torch.load reading a folder:
then no checkpoint of the file is converted, they stay full state dicts (DDP931).

dcp.save and dcp.load exchange their plans between ranks with gather_object and
scatter_object_list, which need numpy (torch 2.13; as a group of one they do not): DDP930
says so unless the script imports numpy itself.
"""
from dataclasses import dataclass, field
from typing import Optional, Union, cast

import libcst as cst

from ddpify.analysis.control import Facts
from ddpify.analysis.facts import Statement
from ddpify.analysis.nodes import dotted_name, find_all, first_free, string_value
from ddpify.diagnostics import Rule, Severity
from ddpify.emit.edits import Edits
from ddpify.emit.fsdp2 import (
    DCP_CHECKPOINT_KEYWORD,
    DCP_LOAD_CODE,
    DCP_LOAD_COMMENT,
    DCP_MODEL_STATE_CODE,
    DCP_OPTIMIZER_STATE_CODE,
    DCP_SAVE_CALL,
    fitted_dict,
)
from ddpify.options import Options
from ddpify.plan import Plan
from ddpify.rules.cases import TRAINING, Emits, Silent

RULES = (
    Rule("DDP313", Severity.EDIT, "checkpoint written and read as a Distributed Checkpoint (--checkpoint dcp)",
         "Every rank saves its own shards of the model and optimizer state with dcp.save, into a "
         "folder at the path the script saved to, and reads them back with dcp.load: nothing is "
         "gathered on one rank, and a checkpoint written by N ranks loads on any number of ranks. "
         "Both are collectives: no rank-0 guard, no barrier. A single-GPU script reads it with "
         "dcp.load too (or `python -m torch.distributed.checkpoint.format_utils dcp_to_torch "
         "FOLDER FILE` makes one torch.save file of it).",
         "Nothing to do."),
    Rule("DDP930", Severity.WARNING, "--checkpoint dcp: Distributed Checkpoints need numpy under torchrun",
         "dcp.save and dcp.load agree on their plan through gather_object and scatter_object_list, "
         "which turn tensors back into objects with numpy; torch does not install numpy, and "
         "without it the first save fails under torchrun (`RuntimeError: Numpy is not "
         "available`). As a group of one (plain python) numpy is not needed. Reported unless the "
         "script imports numpy itself.",
         "Install numpy where the script runs (then --ignore DDP930), or use the default "
         "--checkpoint full, which needs no numpy."),
    Rule("DDP931", Severity.WARNING, "--checkpoint dcp: this checkpoint cannot be followed into a Distributed "
         "Checkpoint; the file's checkpoints stay full state dicts",
         "The state dict is saved or loaded in a shape ddpify does not follow from torch.save to "
         "torch.load (kept in an object, handed to a function, loaded by another path), and a "
         "torch.load left reading a DCP folder would fail. Every checkpoint of the file is left a "
         "full state dict, gathered on every rank and written by rank 0.",
         "Save `{\"model\": model.state_dict(), ...}` with torch.save and read it with "
         "`checkpoint = torch.load(path)` and `checkpoint[\"model\"]`, or keep --checkpoint full."),
)

# (the call of state_dict() or load_state_dict(), "state_dict" / "load_state_dict" /
# "optimizer.state_dict" / "optimizer.load_state_dict", the model's name there): sharding.py's.
StateCall = tuple[cst.Call, str, str]


@dataclass
class _Load:
    """`name = torch.load(path)` and what is read out of `name`: the placeholders dcp.load
    fills, by key (None for the whole state dict)."""
    call: cst.Call
    statement: Statement
    name: str
    entries: dict[Optional[str], str] = field(default_factory=dict)


@dataclass
class Converted:
    """What became a Distributed Checkpoint; sharding.py leaves these calls alone."""
    handled: set[cst.Call] = field(default_factory=set)


def convert(facts: Facts, edits: Edits, setup: Plan, states: list[StateCall],
            optimizer: Optional[str]) -> Optional[Converted]:
    """dcp.save and dcp.load for every checkpoint of the model's state; None (and DDP931)
    when one of them cannot be followed, and the file keeps full state dicts."""
    saves: dict[cst.Call, list[StateCall]] = {}
    loads: dict[cst.Call, _Load] = {}
    direct: list[tuple[StateCall, cst.Call]] = []  # model.load_state_dict(torch.load(path))
    for state in states:
        call, method, _ = state
        if method.endswith("load_state_dict"):
            found = _load_of(facts, call, loads, {state[0] for state in states})
            if isinstance(found, cst.Call):
                direct.append((state, found))
            elif found is None:
                edits.report("DDP931", call)
                return None
            else:
                found.entries[_key_of(call.args[0].value)] = _placeholder(state, optimizer)
        else:
            save = _save_of(facts, call)
            if save is None:
                edits.report("DDP931", call)
                return None
            saves.setdefault(save, []).append(state)
    paths = {edits.code(save.args[1].value) for save in saves}
    for load in facts.load_calls:
        if load.args and edits.code(load.args[0].value) in paths and load not in loads and load not in {
                found for _, found in direct}:
            edits.report("DDP931", load)  # the folder dcp.save writes, read with torch.load
            return None
    if not saves and not loads and not direct:
        return None
    _emit(facts, edits, setup, saves, loads, direct, optimizer)
    return Converted({state[0] for state, _ in direct})


def _placeholder(state: StateCall, optimizer: Optional[str]) -> str:
    _, method, model = state
    if method.startswith("optimizer."):
        return DCP_OPTIMIZER_STATE_CODE.format(model=model, optimizer=optimizer)
    return DCP_MODEL_STATE_CODE.format(model=model)


def _key_of(argument: cst.BaseExpression) -> Optional[str]:
    """`checkpoint["model"]` -> "model"; `checkpoint` -> None (the whole state dict)."""
    return _key_of_safe(argument) if isinstance(argument, cst.Subscript) else None


def _save_of(facts: Facts, call: cst.Call) -> Optional[cst.Call]:
    """The torch.save(obj, path) that writes this state dict: the state inside obj, or inside
    a dict assigned to a name that a later torch.save in the function writes."""
    statement = facts.statement_of(call)
    for save in facts.save_calls:
        if len(save.args) == 2 and not any(arg.keyword for arg in save.args) \
                and facts.statement_of(save) is statement and facts.ancestor_in(call, save.args[0]) is not None:
            return save
    target = _assigned_name(statement)
    if target is None:
        return None
    later = [save for save in facts.save_calls if len(save.args) == 2 and dotted_name(save.args[0].value) == target
             and facts.function_of(save) is facts.function_of(call) and facts.start_of(save) > facts.end_of(statement)]
    return later[0] if later else None


def _load_of(facts: Facts, call: cst.Call, loads: dict[cst.Call, _Load],
             after_shard: set[cst.Call]) -> Union[cst.Call, _Load, None]:
    """Where `X.load_state_dict(arg)` reads from: a torch.load call as its argument, or the
    load its `name[...]` / `name` comes from (`name = torch.load(path)` in the same function,
    `name` read only by string keys or handed whole)."""
    argument = call.args[0].value
    if argument in facts.load_calls and _single_call_statement(facts, call):
        return cast(cst.Call, argument)
    name_node = argument.value if isinstance(argument, cst.Subscript) else argument
    if not isinstance(name_node, cst.Name) or isinstance(argument, cst.Subscript) and _key_of_safe(argument) is None:
        return None
    function = facts.function_of(call)
    assigned = [load for load in facts.load_calls if facts.function_of(load) is function
                and _assigned_name(facts.statement_of(load)) == name_node.value
                and cast(cst.Assign, cast(cst.SimpleStatementLine, facts.statement_of(load)).body[0]).value is load]
    if len(assigned) != 1 or not assigned[0].args:
        return None
    load = assigned[0]
    if load not in loads:
        keys = _keys_read(facts, name_node.value, function, facts.statement_of(load), after_shard)
        if keys is None:
            return None
        # A value that is not a state dict (`checkpoint["epoch"]`) is read into None's place.
        loads[load] = _Load(load, facts.statement_of(load), name_node.value, dict.fromkeys(keys, "None"))
    found = loads[load]
    if not isinstance(argument, cst.Subscript) and found.entries:
        return None  # read both whole and by key
    return found


def _key_of_safe(argument: cst.Subscript) -> Optional[str]:
    if len(argument.slice) != 1 or not isinstance(argument.slice[0].slice, cst.Index):
        return None
    return string_value(argument.slice[0].slice.value)


def _keys_read(facts: Facts, name: str, function: Optional[cst.FunctionDef], loaded: Statement,
               after_shard: set[cst.Call]) -> Optional[list[str]]:
    """The keys `name["key"]` reads after `loaded` (until `name` is bound anew), in order;
    None when `name` is used otherwise than by key or handed whole to a load_state_dict
    after the shard (iterated, passed on, .get(), loaded into the model before its shard)."""
    scope = function if function is not None else facts.module
    keys: list[str] = []
    for node in find_all(scope, cst.Name):
        if node.value != name or facts.start_of(node) < facts.end_of(loaded):
            continue
        parent = facts.parents.get(node)
        if isinstance(parent, cst.AssignTarget) and parent.target is node:
            break  # bound anew (`checkpoint = {...}` to save): later reads are of that value
        key = _key_of_safe(parent) if isinstance(parent, cst.Subscript) and parent.value is node else None
        call = facts.parents.get(parent) if isinstance(parent, cst.Arg) else None
        argument = facts.parents.get(parent) if key is not None and parent is not None else None
        # The load_state_dict that `name[key]` (or `name`) is handed to, if any.
        loader = facts.parents.get(argument) if isinstance(argument, cst.Arg) else call
        if isinstance(loader, cst.Call) and isinstance(loader.func, cst.Attribute) \
                and loader.func.attr.value == "load_state_dict" and loader not in after_shard:
            return None
        if key is not None:
            keys.extend([key] if key not in keys else [])
        elif call not in after_shard:
            return None
    return keys


def _single_call_statement(facts: Facts, call: cst.Call) -> bool:
    statement = facts.statement_of(call)
    return isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 and isinstance(
        statement.body[0], cst.Expr) and statement.body[0].value is call


def _assigned_name(statement: Statement) -> Optional[str]:
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
        small = statement.body[0]
        if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
            return small.targets[0].target.value
    return None


def _emit(facts: Facts, edits: Edits, setup: Plan, saves: dict[cst.Call, list[StateCall]],
          loads: dict[cst.Call, _Load], direct: list[tuple[StateCall, cst.Call]], optimizer: Optional[str]) -> None:
    for save in saves:
        edits.expressions[save] = _dcp_save
        setup.collective_saves.add(save)
        edits.report("DDP313", save)
    for load in loads.values():
        indent = facts.positions[load.statement].start.column
        if None in load.entries:
            code = f"{load.name} = {load.entries[None]}\n"
        else:
            code = fitted_dict(load.name, [(f'"{key}"', value) for key, value in load.entries.items()], indent)
        code += DCP_LOAD_CODE.format(state=load.name, path=edits.code(load.call.args[0].value)) + "\n"
        _replace_load(facts, edits, setup, load.statement, load.call, code)
    for state, direct_load in direct:
        call, method, model = state
        optimizer_state = method.startswith("optimizer.")
        name = first_free("optimizer_state" if optimizer_state else "model_state",
                          lambda candidate: candidate in facts.bound_names)
        setter = "set_optimizer_state_dict" if optimizer_state else "set_model_state_dict"
        target = f"{model}, {optimizer}" if optimizer_state else model
        code = (f"{name} = {_placeholder(state, optimizer)}\n"
                + DCP_LOAD_CODE.format(state=name, path=edits.code(direct_load.args[0].value)) + "\n"
                + f"{setter}({target}, {name})\n")
        _replace_load(facts, edits, setup, facts.statement_of(call), direct_load, code)
        edits.imports.add(setter)
    placeholders = [entry for load in loads.values() for entry in load.entries.values()] + [
        _placeholder(state, optimizer) for state, _ in direct]
    edits.imports.add("dcp")
    edits.imports.update(getter for getter in ("get_model_state_dict", "get_optimizer_state_dict")
                         if any(entry.startswith(getter) for entry in placeholders))
    if saves and not _imports_numpy(facts):
        edits.report("DDP930", min(saves, key=facts.start_of))


def _replace_load(facts: Facts, edits: Edits, setup: Plan, statement: Statement, load: cst.Call, code: str) -> None:
    statements = edits.statements(code)
    statements[0] = statements[0].with_changes(leading_lines=[
        *statement.leading_lines, cst.EmptyLine(comment=cst.Comment(DCP_LOAD_COMMENT))])
    edits.replace(statement, statements)
    setup.collective_loads.add(load)
    edits.report("DDP313", load)


def _dcp_save(call: cst.Call) -> cst.Call:
    """torch.save(obj, path) -> dcp.save(obj, checkpoint_id=path), keeping the call's layout."""
    state, path = call.args
    return call.with_changes(
        func=cst.parse_expression(DCP_SAVE_CALL),
        args=[state, path.with_changes(keyword=cst.Name(DCP_CHECKPOINT_KEYWORD),
                                       equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                                             whitespace_after=cst.SimpleWhitespace("")))])


def _imports_numpy(facts: Facts) -> bool:
    return any(dotted_name(alias.name) == "numpy" or (dotted_name(alias.name) or "").startswith("numpy.")
               for node in facts.nodes_of(cst.Import) for alias in node.names) or any(
        node.module is not None and (dotted_name(node.module) or "").split(".")[0] == "numpy"
        for node in facts.nodes_of(cst.ImportFrom))


FSDP2_DCP = Options(strategy="fsdp2", checkpoint="dcp")
_SAVED = TRAINING + 'torch.save(model.state_dict(), "model.pt")\n'
# The best weights read back after training, into the sharded model.
_RESUMED = _SAVED + 'model.load_state_dict(torch.load("model.pt"))\n'
_CHECKPOINTED = TRAINING + """\
checkpoint = {"epoch": epoch, "model": model.state_dict(), "optimizer": optimizer.state_dict()}
torch.save(checkpoint, "last.pt")
checkpoint = torch.load("last.pt")
model.load_state_dict(checkpoint["model"])
optimizer.load_state_dict(checkpoint["optimizer"])
"""

CASES = (
    Emits(_SAVED, "DDP313", ("model_state = get_model_state_dict(model)\n"
                             'dcp.save(model_state, checkpoint_id="model.pt")',), FSDP2_DCP),
    Silent(_SAVED, "DDP313", Options(strategy="fsdp2")),
    Emits(_SAVED, "DDP930", (), FSDP2_DCP),
    Silent("import numpy as np\n" + _SAVED, "DDP930", FSDP2_DCP),
    Emits(_RESUMED, "DDP313", ('model_state = get_model_state_dict(model)\n'
                               'dcp.load(model_state, checkpoint_id="model.pt")\n'
                               "set_model_state_dict(model, model_state)\n",), FSDP2_DCP),
    # Weights loaded before the shard were not written by this script's dcp.save: torch.load stays.
    Silent(TRAINING.replace("optimizer = torch.optim", 'model.load_state_dict(torch.load("init.pt"))\n'
                            "optimizer = torch.optim"), "DDP313", FSDP2_DCP),
    Emits(_CHECKPOINTED, "DDP313", ('checkpoint = {\n    "model": get_model_state_dict(model),\n'
                                    '    "optimizer": get_optimizer_state_dict(model, optimizer),\n}\n'
                                    'dcp.load(checkpoint, checkpoint_id="last.pt")\n',
                                    'dcp.save(checkpoint, checkpoint_id="last.pt")'), FSDP2_DCP),
    # Resumed, then the same name bound anew to the next checkpoint's dict and saved; the
    # model loads before its shard (the shard follows the last statement that touches it):
    # dcp.load cannot fill an unsharded model here, so every checkpoint stays full.
    Emits(TRAINING.replace("for epoch in range(3):", 'checkpoint = torch.load("last.pt")\n'
                           'model.load_state_dict(checkpoint["model"])\n'
                           'optimizer.load_state_dict(checkpoint["optimizer"])\nfor epoch in range(3):')
          + 'checkpoint = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}\n'
            'torch.save(checkpoint, "last.pt")\n', "DDP931", ('torch.load("last.pt", map_location=device)',),
          FSDP2_DCP),
    # Handed to a function that saves it: not followed, so nothing becomes DCP.
    Emits(TRAINING + '\n\ndef save(state):\n    torch.save(state, "model.pt")\n\n\nsave(model.state_dict())\n',
          "DDP931", ("options=StateDictOptions(full_state_dict=True",), FSDP2_DCP),
    # The folder dcp.save writes, read by torch.load for something else.
    Emits(_SAVED + 'print(len(torch.load("model.pt")))\n', "DDP931", (), FSDP2_DCP),
)
