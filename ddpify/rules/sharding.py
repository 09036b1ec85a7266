"""The FSDP2 target (`--strategy fsdp2`): the model is sharded in place instead of wrapped
(DDP107, DDP108), its optimizer is built after the shard (DDP109, DDP906), and checkpoints
hold full state dicts gathered on every rank (DDP312, DDP907); recurrent layers are
reported (DDP908).

model.py finds where the model reaches its device, as for DDP, and calls `shard` there. The
model stays the model: no `.module` rewrite applies. Setup, samplers, rank-0 output and
evaluation are the DDP target's.
"""
from typing import Optional, cast

import libcst as cst

from ddpify.analysis import effects, names, traversal
from ddpify.analysis.control import Facts
from ddpify.analysis.facts import Model, Statement
from ddpify.analysis.nodes import calls_within, dotted_name, first_free, names_in
from ddpify.diagnostics import Rule, Severity
from ddpify.emit.edits import Edits, Insertion, replacement
from ddpify.emit.fsdp2 import (
    COMPILE_BLOCK_LINE,
    DCP_LOAD_MODEL_CODE,
    DCP_LOAD_OPTIMIZER_CODE,
    DCP_MODEL_STATE_CODE,
    DCP_OPTIMIZER_STATE_CODE,
    DCP_SAVE_COMMENT,
    GATHERED_COMMENT,
    LOAD_MODEL_CODE,
    LOAD_OPTIMIZER_CODE,
    LOAD_OPTIONS_CODE,
    LOAD_OPTIONS_COMMENT,
    MIXED_PRECISION_CODE,
    MODEL_STATE_CODE,
    OPTIMIZER_STATE_CODE,
    POLICY_ARGUMENT,
    ROOT_COMPILE_COMMENT,
    ROOT_COMPILE_CONDITION,
    SHARD_BLOCKS_CODE,
    SHARD_COMMENT,
    SHARD_ROOT_CODE,
    SHARD_ROOT_COMMENT,
    fitted_assignment,
)
from ddpify.options import Options
from ddpify.plan import Plan
from ddpify.rules import dcp
from ddpify.rules.cases import TRAINING, Emits, Silent

RULES = (
    Rule("DDP107", Severity.EDIT, "model sharded with FSDP2: fully_shard on each block, then the root",
         "With --strategy fsdp2 each rank keeps a shard of the parameters, gradients and "
         "optimizer state; each repeated block is gathered for its own forward and backward "
         "and freed afterwards, so one block at a time is whole on a GPU.",
         "Nothing to do."),
    Rule("DDP108", Severity.WARNING, "FSDP2: no repeated blocks found in the model class",
         "Without a block list (an nn.ModuleList or nn.Sequential of one block class that "
         "forward iterates) only the root is sharded: the whole model is gathered for every "
         "forward, and the memory saving is lost during it.",
         "Run ddpify with --fsdp-blocks ATTR naming the attribute that holds the blocks "
         "(`--fsdp-blocks features` for self.features)."),
    Rule("DDP109", Severity.EDIT, "optimizer built after the model is sharded",
         "fully_shard replaces the parameters with sharded ones: an optimizer built before "
         "it would hold the old tensors and update nothing the model uses.",
         "Nothing to do."),
    Rule("DDP110", Severity.EDIT, "torch.compile applied to each block before fully_shard",
         "A script that compiles its model gets each repeated block compiled before its shard, "
         "as torchtitan does: the blocks share one compiled graph, and FSDP2's gathers and "
         "reduce-scatters around each block stay outside it. The root is not compiled under "
         "torchrun; as a group of one (plain python) the script compiles the whole model as before.",
         "Nothing to do."),
    Rule("DDP312", Severity.EDIT, "full state dict gathered on every rank, saved or loaded as one file",
         "A sharded model's state_dict() holds only this rank's shards. "
         "get_model_state_dict(..., full_state_dict=True) gathers the whole of it, a collective "
         "that every rank joins; only the file write is rank 0's. The file loads into the "
         "single-GPU model unchanged; set_model_state_dict loads one back into the shards.",
         "Nothing to do."),
    Rule("DDP906", Severity.WARNING, "FSDP2: the optimizer is built before the shard and cannot be moved",
         "The optimizer must see the sharded parameters, but code between its construction "
         "and the shard uses it (a scheduler, a checkpoint load), or it is built in another "
         "function.",
         "Build the optimizer (and what uses it) after `fully_shard(model)`."),
    Rule("DDP908", Severity.WARNING, "FSDP2: recurrent layers (nn.LSTM, nn.GRU, nn.RNN) do not run sharded",
         "A recurrent layer keeps its own list of its weights for the fused kernel; FSDP2 swaps "
         "the parameters for gathered and sharded ones, and the forward fails (on the CPU: "
         "`aten.mkldnn_rnn_layer.default got mixed torch.Tensor and DTensor`).",
         "Keep this model on DDP (the default strategy), or shard only the blocks without "
         "recurrent layers (--fsdp-blocks)."),
    Rule("DDP907", Severity.WARNING, "FSDP2: a helper module or torch.save is handed the sharded model",
         "A helper module handed the model (to save it, or to compute a figure from its "
         "parameters) sees only this rank's shards, and on rank 0 alone it could not join "
         "the collective that gathers them; torch.save(model) pickles the shards.",
         "Gather the full state dict on every rank with get_model_state_dict(model, "
         "options=StateDictOptions(full_state_dict=True, cpu_offload=True)) and save that on rank 0."),
)

BLOCK_LISTS = ("torch.nn.ModuleList", "torch.nn.Sequential")
RECURRENT_LAYERS = ("torch.nn.LSTM", "torch.nn.GRU", "torch.nn.RNN")


def shard(facts: Facts, edits: Edits, setup: Plan, model: Model, anchor: Statement, condition: str) -> None:
    """`fully_shard` on each repeated block and on the root, right after the model reaches
    its device (model.py's anchor); the optimizer follows; state dicts are gathered."""
    anchor = _before_optimizer(facts, model, anchor)
    model_class = _model_class(facts, model)
    blocks = edits.options.fsdp_blocks or (_block_list(facts, facts.classes[model_class])
                                           if model_class in facts.classes else None)
    if edits.options.fsdp_blocks and model_class in facts.classes and not _assigns_attribute(
            facts.classes[model_class], edits.options.fsdp_blocks.split(".")[0]):
        edits.report("DDP108", anchor, f"FSDP2: `{model_class}` has no attribute "
                     f"`{edits.options.fsdp_blocks}` (--fsdp-blocks): only the root is sharded")
        blocks = None
    policy, policy_line = "", ""
    if _uses_bf16_autocast(facts):
        policy, policy_line = POLICY_ARGUMENT, MIXED_PRECISION_CODE
        edits.imports.add("MixedPrecisionPolicy")
    if blocks is None and not edits.options.fsdp_blocks:
        edits.report("DDP108", anchor, f"FSDP2: no repeated blocks found in `{model_class or model.name}`: "
                     "only the root is sharded; name them with --fsdp-blocks ATTR")
    if blocks is None:
        code = SHARD_ROOT_COMMENT + "\n" + SHARD_ROOT_CODE.format(
            condition=condition, model=model.name, policy=policy, policy_line=policy_line)
    else:
        function = facts.function_of(anchor)
        taken = names_in(function) if function is not None else facts.bound_names
        block = first_free("block", lambda name: name in taken)
        compiled = _root_compile(facts, model, anchor)
        compile_line = "" if compiled is None else COMPILE_BLOCK_LINE.format(
            block=block, arguments=", ".join(edits.code(arg) for arg in compiled[1].args[1:]))
        if compiled is not None:
            _compile_only_as_a_group_of_one(edits, compiled[0], condition)
        code = SHARD_COMMENT + "\n" + SHARD_BLOCKS_CODE.format(
            condition=condition, model=model.name, blocks=blocks, block=block, policy=policy,
            policy_line=policy_line, compile_line=compile_line)
    statements = edits.statements(code)
    edits.insert_after(anchor, statements)
    edits.imports.add("fully_shard")
    edits.report("DDP107", anchor, None if blocks is not None else
                 "model sharded with FSDP2: fully_shard on the root (no block list)")
    setup.wrap_points[model.name] = anchor
    _optimizer_after_shard(facts, edits, model, anchor)
    _full_state_dicts(facts, edits, setup, model, anchor)
    recurrent = [call for qualified in RECURRENT_LAYERS for call in facts.calls_named.get(qualified, ())]
    if recurrent and not any(diagnostic.code == "DDP908" for diagnostic in edits.diagnostics):  # once a file
        edits.report("DDP908", min(recurrent, key=facts.start_of))


def _root_compile(facts: Facts, model: Model, anchor: Statement) -> Optional[tuple[Statement, cst.Call]]:
    """`model = torch.compile(model, ...)` after the shard, in the block the shard goes into:
    the statement and its call."""
    for statement in facts.compile_statements.get(model.name, ()):
        if _assigned_name(statement) != model.name or facts.block_of(statement) is not facts.block_of(anchor) \
                or facts.start_of(statement) < facts.end_of(anchor):
            continue
        value = cast(cst.Assign, cast(cst.SimpleStatementLine, statement).body[0]).value
        if isinstance(value, cst.Call) and value.args and dotted_name(value.args[0].value) == model.name \
                and not any(arg.keyword is None for arg in value.args[1:]):
            return statement, value
    return None


def _compile_only_as_a_group_of_one(edits: Edits, statement: Statement, condition: str) -> None:
    """The script's own compile of the whole model runs only as a group of one."""
    guarded = cst.If(
        test=edits.expression(ROOT_COMPILE_CONDITION.format(condition=condition)),
        body=cst.IndentedBlock(body=[statement.with_changes(leading_lines=())], header=cst.TrailingWhitespace(
            whitespace=cst.SimpleWhitespace("  "), comment=cst.Comment(ROOT_COMPILE_COMMENT))),
        leading_lines=statement.leading_lines)
    edits.replace(statement, [guarded])
    edits.report("DDP110", statement)


def _model_class(facts: Facts, model: Model) -> Optional[str]:
    """The class the model is built from (`TinyTransformer().to(device)`), where its value
    is assigned: the first call of a class defined in this file, else the first call's name."""
    called: list[str] = []
    for _, name in sorted(facts.model_holders(model), key=lambda held: held[1]):
        for value in facts.assigned_values.get(name, ()):
            called.extend(dotted_name(call.func) or "" for call in calls_within(value))
    return next((name for name in called if name in facts.classes), next((n for n in called if n), None))


def _block_list(facts: Facts, node: cst.ClassDef) -> Optional[str]:
    """The attribute that holds the model's repeated blocks: `self.layers = nn.ModuleList([Block()
    for _ in range(n)])` (or an nn.Sequential of them) that forward iterates or calls."""
    methods = {m.name.value: m for m in node.body.body if isinstance(m, cst.FunctionDef)}
    init, forward = methods.get("__init__"), methods.get("forward")
    if init is None or forward is None:
        return None
    iterated = {dotted_name(loop.iter) for loop in _loops(forward)}
    called = {dotted_name(call.func) for call in calls_within(forward)}
    for statement in init.body.body if isinstance(init.body, cst.IndentedBlock) else ():
        for small in statement.body if isinstance(statement, cst.SimpleStatementLine) else ():
            if not isinstance(small, cst.Assign) or len(small.targets) != 1:
                continue
            target = dotted_name(small.targets[0].target)
            if target is None or not target.startswith("self.") or not _is_block_list(facts, small.value):
                continue
            if target in iterated or target in called:
                return target[len("self."):]
    return None


def _assigns_attribute(node: cst.ClassDef, attribute: str) -> bool:
    """`self.attribute = ...` somewhere in the class's methods."""
    return any(dotted_name(target.target) == f"self.{attribute}"
               for method in node.body.body if isinstance(method, cst.FunctionDef)
               for assign in _assigns_in(method) for target in assign.targets)


def _assigns_in(node: cst.CSTNode) -> list[cst.Assign]:
    found: list[cst.Assign] = []

    class _Assigns(cst.CSTVisitor):
        def visit_Assign(self, assign: cst.Assign) -> None:
            found.append(assign)

    traversal.visit(node, _Assigns())
    return found


def _loops(node: cst.CSTNode) -> list[cst.For]:
    found: list[cst.For] = []

    class _Loops(cst.CSTVisitor):
        def visit_For(self, loop: cst.For) -> None:
            found.append(loop)

    traversal.visit(node, _Loops())
    return found


def _is_block_list(facts: Facts, value: cst.BaseExpression) -> bool:
    """`nn.ModuleList([Block() for _ in range(n)])`, `nn.Sequential(*[Block() ...])`,
    `nn.ModuleList([Block(), Block()])`, `nn.Sequential(Block(), Block())`: a container of
    calls of one block class."""
    if not isinstance(value, cst.Call) or not any(
            value in facts.calls_named.get(qualified, ()) for qualified in BLOCK_LISTS):
        return False
    if len(value.args) > 1:  # nn.Sequential(Block(), Block())
        made = {dotted_name(arg.value.func) if isinstance(arg.value, cst.Call) and not arg.star else None
                for arg in value.args}
        return len(made) == 1 and None not in made
    if len(value.args) != 1:
        return False
    elements = value.args[0].value
    if isinstance(elements, (cst.ListComp, cst.GeneratorExp)):
        return isinstance(elements.elt, cst.Call)
    if isinstance(elements, (cst.List, cst.Tuple)) and len(elements.elements) > 1:
        made = {dotted_name(element.value.func) if isinstance(element.value, cst.Call) else None
                for element in elements.elements}
        return len(made) == 1 and None not in made
    return False


def _uses_bf16_autocast(facts: Facts) -> bool:
    return any("bfloat16" in facts.module.code_for_node(call)
               for qualified in names.AUTOCAST for call in facts.calls_named.get(qualified, ()))


def _optimizer_after_shard(facts: Facts, edits: Edits, model: Model, anchor: Statement) -> None:
    """The optimizer must see the sharded parameters: built before the anchor in the same
    block, and with nothing in between using it, it moves below the shard."""
    optimizer = model.optimizer_statement
    kept = _parameters_kept_before(facts, model, anchor)
    if kept is not None:
        edits.report("DDP906", kept, f"FSDP2: `{edits.code(kept).splitlines()[0].strip()}` keeps the model's "
                     "parameters before the shard replaces them: build what the optimizer takes after it")
        return
    if facts.function_of(optimizer) is facts.function_of(anchor) and facts.start_of(optimizer) > facts.end_of(anchor):
        return
    name = _assigned_name(optimizer)
    block = facts.block_of(anchor)
    body = list(block.body)
    if name is None or optimizer not in body or body.index(optimizer) > body.index(anchor):
        edits.report("DDP906", optimizer)
        return
    between = body[body.index(optimizer) + 1:body.index(anchor) + 1]
    if any(name in names_in(statement) for statement in between):
        edits.report("DDP906", optimizer)
        return
    edits.removed.add(optimizer)
    edits.insert_after(anchor, [optimizer.with_changes(leading_lines=())])
    edits.report("DDP109", optimizer)


def _parameters_kept_before(facts: Facts, model: Model, anchor: Statement) -> Optional[Statement]:
    """A statement before the shard that stores the model's parameters (`params =
    list(model.parameters())`, a loop that appends them to parameter groups): fully_shard
    replaces every parameter, so what it stored is stale. Reading them to count or freeze
    them (a print, `p.requires_grad = False`) is harmless."""
    for _, name in facts.model_holders(model):
        for access in facts.attribute_reads.get(name, ()):
            if access.attr.value not in ("parameters", "named_parameters") or not _before(facts, access, anchor):
                continue
            statement = facts.statement_of(access)
            if statement is model.optimizer_statement or statement in facts.output_statements:
                continue
            call = facts.parents.get(access)
            loop = facts.parents.get(call) if call is not None else None  # `for ... in model.parameters()`
            if isinstance(loop, cst.For) and loop.iter is call:
                if any(dotted_name(call.func) is not None and dotted_name(call.func).rsplit(".", 1)[-1]  # type: ignore[union-attr]
                       in ("append", "extend", "add", "insert") for call in calls_within(loop.body)):
                    return loop
            elif _assigned_name(statement) is not None:
                return statement
    return None


def _before_optimizer(facts: Facts, model: Model, anchor: Statement) -> Statement:
    """Where DDP would wrap, unless the optimizer, built before that, is used on the way
    (a resumed checkpoint loads into it): then the shard goes where the model was last
    built or moved before the optimizer, and the loads after it load into the shards."""
    optimizer = model.optimizer_statement
    body = [statement for statement in facts.block_of(anchor).body
            if isinstance(statement, (cst.SimpleStatementLine, cst.BaseCompoundStatement))]
    name = _assigned_name(optimizer)
    if name is None or optimizer not in body or anchor not in body or body.index(optimizer) > body.index(anchor):
        return anchor
    between = body[body.index(optimizer) + 1:body.index(anchor) + 1]
    if not any(name in names_in(statement) for statement in between):
        return anchor  # the optimizer itself can move below the shard
    if any(_moves_or_builds(facts, statement, model.name) for statement in between):
        return anchor  # the model is not on its device yet: DDP906
    earlier = [statement for statement in body[:body.index(optimizer)]
               if _moves_or_builds(facts, statement, model.name)]
    return earlier[-1] if earlier else anchor


def _moves_or_builds(facts: Facts, statement: Statement, name: str) -> bool:
    moves = {facts.statement_of(call) for call in facts.device_moves.get(name, ())}
    return statement in moves or _assigned_name(statement) == name or any(
        facts.ancestor_in(move, statement) is not None for move in moves
        if isinstance(statement, cst.BaseCompoundStatement))


def _assigned_name(statement: Statement) -> Optional[str]:
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
        small = statement.body[0]
        if isinstance(small, cst.Assign) and len(small.targets) == 1:
            return dotted_name(small.targets[0].target)
    return None


def _full_state_dicts(facts: Facts, edits: Edits, setup: Plan, model: Model, anchor: Statement) -> None:
    """After the shard, `model.state_dict()` would hold this rank's shards: every rank gathers
    the full one instead, into a name above the statement (so above the rank-0 guard of a
    save), and `model.load_state_dict(sd)` loads a full one into the shards. The optimizer's
    state likewise."""
    holders = facts.model_holders(model)
    optimizer = _assigned_name(model.optimizer_statement)
    found: list[tuple[cst.Call, str, str]] = []  # (call, method, the model's name there)
    for function, name in holders:
        for access in _method_calls(facts, name, function, anchor):
            found.append((cast(cst.Call, facts.parents[access]), access.attr.value, name))
        for access in _method_calls(facts, optimizer, function, anchor) if optimizer else ():
            found.append((cast(cst.Call, facts.parents[access]), "optimizer." + access.attr.value, name))
    # `state_dict()` takes no argument, `load_state_dict(state)` one.
    found = [(call, method, name) for call, method, name in found
             if method.split(".")[-1] in ("state_dict", "load_state_dict")
             and len(call.args) == (1 if method.endswith("load_state_dict") else 0)]
    converted = dcp.convert(facts, edits, setup, found, optimizer) if edits.options.dcp else None
    hoisted: dict[Statement, list[Statement]] = {}
    load_options: dict[cst.CSTNode, str] = {}
    for call, method, name in sorted(found, key=lambda item: facts.start_of(item[0])):
        if converted is not None and call in converted.handled:
            continue
        if method in ("state_dict", "optimizer.state_dict"):
            full = converted is None
            code = (MODEL_STATE_CODE if full else DCP_MODEL_STATE_CODE) if method == "state_dict" else (
                OPTIMIZER_STATE_CODE if full else DCP_OPTIMIZER_STATE_CODE)
            _gather(facts, edits, call, code.format(model=name, optimizer=optimizer), hoisted, full)
            continue
        state = edits.code(call.args[0].value)
        if converted is not None:
            code = (DCP_LOAD_MODEL_CODE.format(model=name, state=state) if method == "load_state_dict"
                    else DCP_LOAD_OPTIMIZER_CODE.format(model=name, optimizer=optimizer, state=state))
        else:
            options = _load_options(facts, edits, call, load_options)
            code = (LOAD_MODEL_CODE.format(model=name, state=state, options=options) if method == "load_state_dict"
                    else LOAD_OPTIMIZER_CODE.format(model=name, optimizer=optimizer, state=state, options=options))
            edits.report("DDP312", call)
        edits.expressions[call] = replacement(edits, code)
        edits.imports.add("set_model_state_dict" if method == "load_state_dict" else "set_optimizer_state_dict")
    _rank0_readers(facts, edits, holders, anchor)


def _load_options(facts: Facts, edits: Edits, call: cst.Call, made: dict[cst.CSTNode, str]) -> str:
    """The name of the options a load into the shards takes, made once per block, above
    the first load in it."""
    statement = facts.statement_of(call)
    block = facts.block_of(statement)
    if block not in made:
        name = first_free("load_options", lambda candidate: candidate in facts.bound_names)
        made[block] = name
        code = fitted_assignment(LOAD_OPTIONS_CODE.format(name=name), facts.positions[statement].start.column)
        options = edits.statement(code).with_changes(
            leading_lines=[cst.EmptyLine(comment=cst.Comment(LOAD_OPTIONS_COMMENT))])
        edits.before.setdefault(statement, []).append(Insertion([options], takes_blank_lines=True))
        edits.imports.update({"StateDictOptions", "dist"})
    return made[block]


def _method_calls(facts: Facts, name: str, function: Optional[cst.FunctionDef],
                  anchor: Statement) -> list[cst.Attribute]:
    """`name.method(...)` in `function` (in any method for `self.name`), after the shard."""
    return [access for access in facts.attribute_reads.get(name, ())
            if isinstance(facts.parents.get(access), cst.Call)
            and cast(cst.Call, facts.parents[access]).func is access
            and (name.startswith("self.") or facts.function_of(access) is function)
            and not _before(facts, access, anchor)]


def _gather(facts: Facts, edits: Edits, call: cst.Call, code: str,
            hoisted: dict[Statement, list[Statement]], full: bool = True) -> None:
    """The gather goes into a name above the statement that used the state dict: every rank
    runs it there, also when the statement itself is a save that side_effects.py guards for
    rank 0 (a collective inside the guard would wait forever for the other ranks). With
    `full=False` (--checkpoint dcp) the state dict is this rank's shards, for dcp.save."""
    statement = facts.statement_of(call)
    edits.imports.add("get_model_state_dict" if code.startswith("get_model") else "get_optimizer_state_dict")
    if full:
        edits.imports.add("StateDictOptions")
        edits.report("DDP312", call)
    base = "model_state" if code.startswith("get_model") else "optimizer_state"
    name = first_free(base, lambda candidate: candidate in facts.bound_names or any(
        edits.code(earlier).startswith(f"{candidate} =") for earlier in hoisted.get(statement, ())))
    gathered = edits.statement(fitted_assignment(f"{name} = {code}", facts.positions[statement].start.column))
    if statement not in hoisted:
        hoisted[statement] = []
        comment = (DCP_SAVE_COMMENT if not full else GATHERED_COMMENT if statement in facts.output_statements
                   else GATHERED_COMMENT.split(";")[0] + ".")
        gathered = gathered.with_changes(leading_lines=[cst.EmptyLine(comment=cst.Comment(comment))])
        edits.before.setdefault(statement, []).append(Insertion(hoisted[statement], takes_blank_lines=True))
    hoisted[statement].append(gathered)
    edits.expressions[call] = replacement(edits, name)


def _rank0_readers(facts: Facts, edits: Edits, holders: set, anchor: Statement) -> None:
    """A helper module handed the model (`utils.save_checkpoint(model, path)`) or torch.save
    of the whole model: ddpify cannot gather for them, so a person must."""
    model_names = {name for _, name in holders}
    for call, effect in facts.helper_effects.items():
        if effect != effects.MIXED and any(dotted_name(arg.value) in model_names for arg in call.args) \
                and not _before(facts, call, anchor):
            edits.report("DDP907", call)
    for call in facts.save_calls:
        if call.args and dotted_name(call.args[0].value) in model_names and not _before(facts, call, anchor):
            edits.report("DDP907", call)


def _before(facts: Facts, node: cst.CSTNode, anchor: Statement) -> bool:
    """In the anchor's function, before the shard (or inside the statement it follows)."""
    return facts.function_of(node) is facts.function_of(anchor) and facts.start_of(node) < facts.end_of(anchor)


FSDP2 = Options(strategy="fsdp2")
_BLOCKS = TRAINING.replace("model = torch.nn.Linear(4, 1).to(device)\n", '''\
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(2)])
        self.head = torch.nn.Linear(4, 1)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


model = Net().to(device)
''')
_SAVED = _BLOCKS + 'torch.save(model.state_dict(), "model.pt")\n'

CASES = (
    Emits(_BLOCKS, "DDP107", ("for block in model.layers:\n        fully_shard(block)\n    fully_shard(model)",),
          FSDP2),
    Silent(_BLOCKS, "DDP108", FSDP2),
    Emits(TRAINING, "DDP108", ("fully_shard(model)",), FSDP2),
    Silent(_BLOCKS, "DDP108", Options(strategy="fsdp2", fsdp_blocks="layers")),
    Emits(_BLOCKS, "DDP108", ("    fully_shard(model)\n",), Options(strategy="fsdp2", fsdp_blocks="stages")),
    Emits(_BLOCKS.replace("model = Net().to(device)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n",
                          "model = Net()\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
                          "model.to(device)\n"),
          "DDP109", ("    fully_shard(model)\noptimizer = torch.optim.SGD",), FSDP2),
    Emits(_BLOCKS.replace("model = Net().to(device)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n",
                          "model = Net()\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
                          "print(optimizer)\nmodel.to(device)\n"), "DDP906", (), FSDP2),
    Emits(_SAVED, "DDP312", ("model_state = get_model_state_dict(\n    model, options=StateDictOptions(full_state_dict="
                             "True, cpu_offload=True)\n)\nif is_main:\n    torch.save(model_state, ",), FSDP2),
    Silent(_SAVED, "DDP312"),
    Emits(_BLOCKS + 'torch.save(model, "model.pt")\n', "DDP907", (), FSDP2),
    Emits(_BLOCKS.replace("torch.nn.Linear(4, 4) for", "torch.nn.GRU(4, 4) for"), "DDP908", (), FSDP2),
    Silent(_BLOCKS, "DDP908", FSDP2),
    Emits(_BLOCKS.replace("model = Net().to(device)\n", "model = Net().to(device)\nmodel = torch.compile(model, "
                          'mode="max-autotune")\n'), "DDP110",
          ('        block.compile(mode="max-autotune")  # each block compiled before its shard\n'
           "        fully_shard(block)",
           'if not distributed:  # as a group of one; under torchrun each block was compiled\n'
           '    model = torch.compile(model, mode="max-autotune")\n'), FSDP2),
    Silent(_BLOCKS.replace("model = Net().to(device)\n", "model = Net().to(device)\nmodel = torch.compile(model)\n"),
           "DDP110"),
    # No block list: the whole model is compiled after its shard, as the script wrote it.
    Silent(TRAINING.replace("optimizer = torch", "model = torch.compile(model)\noptimizer = torch"), "DDP110", FSDP2),
    Emits(_BLOCKS.replace("model = Net().to(device)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)",
                          "model = Net()\nparams = list(model.parameters())\nmodel.to(device)\n"
                          "optimizer = torch.optim.SGD(params, lr=0.1)"), "DDP906", (), FSDP2),
    Silent(_BLOCKS.replace("optimizer = torch.optim.SGD(model.parameters(), lr=0.1)",
                           "params = list(model.parameters())\noptimizer = torch.optim.SGD(params, lr=0.1)"),
           "DDP906", FSDP2),
    Silent(_BLOCKS.replace("optimizer = torch.optim.SGD(model.parameters(), lr=0.1)",
                           "print(sum(p.numel() for p in model.parameters()))\n"
                           "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)"), "DDP906", FSDP2),
)
