"""DDP wrapping and reaching the raw model through `.module` (DDP101, DDP103, DDP903).

The wrap goes right after the last statement that builds, moves or loads the model before
its optimizer is created: DDP must see the model on its final device, and checkpoints
loaded before the wrap need no `.module`.
"""
import re
from collections.abc import Callable, Iterable
from typing import Optional, Union, cast

import libcst as cst

from ddpify.analysis import effects, figures, freezing, later_moves, names, repeated_forwards, traversal
from ddpify.analysis.conditional_parts import TRAINING_MODE
from ddpify.analysis.containers import condition_code, container_moves, entry_moves, module_looped_over
from ddpify.analysis.control import Facts, handed_in, innermost_common_block, receiver_of
from ddpify.analysis.effects import MODULE_ONLY_METHODS
from ddpify.analysis.facts import ConditionalPart, Holder, Model, Statement
from ddpify.analysis.navigation import ancestors_up_to
from ddpify.analysis.nodes import (
    argument_among,
    argument_for,
    assigned_names,
    assignment_pairs,
    calls_within,
    dotted_name,
    find_all,
    handed_for,
    is_false,
    is_true,
    names_bound_in,
    names_in,
    names_within,
    parameter_names,
    positional_parameters,
    self_attributes,
    within,
)
from ddpify.diagnostics import Rule, Severity
from ddpify.emit.ddp import (
    ONLY_IF_TRAINABLE_COMMENT,
    SYNC_BATCHNORM_CODE,
    WRAP_CODE,
    WRAP_CODE_EXPLODED,
    WRAP_CODE_SPLIT,
    WRAP_ON_CPU_CODE,
    WRAP_OUT_OF_SETUP_CODE,
)
from ddpify.emit.edits import Edits, Insertion, Rewrite
from ddpify.emit.layout import LINE_LENGTH, fits
from ddpify.options import Options
from ddpify.plan import Plan
from ddpify.rules import (
    dropped_outputs,
    early_copies,
    lazy_layers,
    method_forwards,
    moved_each_call,
    part_runs,
    sharding,
)
from ddpify.rules.cases import TRAINING, Emits, Silent
from ddpify.rules.setup import gpu_made_the_default, read_from_the_scope_around, where_the_read_model_moves

RULES = (
    Rule("DDP101", Severity.EDIT, "model wrapped in DistributedDataParallel",
         "DDP all-reduces gradients during backward so that every rank applies the same update.",
         "Nothing to do."),
    Rule("DDP102", Severity.EDIT, "nn.DataParallel replaced by DistributedDataParallel",
         "DataParallel runs one process that scatters to all GPUs; under torchrun each "
         "process owns one GPU, so DataParallel would replicate onto GPUs other ranks own.",
         "Nothing to do."),
    Rule("DDP112", Severity.EDIT, "checkpoint of the DataParallel model loads with its `module.` prefix stripped",
         "DataParallel saved its model's keys as `module.conv1.weight`; once DataParallel is "
         "gone the model's own keys have no prefix, so a checkpoint written before the "
         "migration (or a released one) would no longer load.",
         "Nothing to do; the prefix is stripped only where present."),
    Rule("DDP113", Severity.WARNING, "gradient penalty through the wrapped model: give it no backward of its own",
         "`torch.autograd.grad(..., create_graph=True)` over the output of a wrapped model (a WGAN-GP "
         "or R1 penalty) builds a second backward that reaches only the parameters the input "
         "gradient depends on (not the last layer's bias). A `.backward()` of the penalty alone "
         "therefore leaves DDP waiting for the other gradients, and the next forward fails with "
         "\"Expected to have finished reduction in the prior iteration\", even with "
         "find_unused_parameters=True or static_graph=True.",
         "Add the penalty to the loss and call backward once (`(d_loss + gp).backward()`); then "
         "silence this with `# ddpify: ignore[DDP113]` on the autograd.grad line."),
    Rule("DDP114", Severity.WARNING, "two backward passes through one forward of the wrapped model",
         "`out2, out4 = model(x)`, then `loss2.backward(retain_graph=True)` and `loss4.backward()`: "
         "DDP prepares one gradient reduction per forward, and the second backward marks the same "
         "parameters ready again (\"Expected to mark a variable ready only once\"), even with "
         "static_graph=True.",
         "Call backward once on the sum (`(loss2 + loss4).backward()`: the same gradients), or run "
         "a forward before each backward; then silence this with `# ddpify: ignore[DDP114]`."),
    Rule("DDP103", Severity.EDIT, "raw model reached through `.module`",
         "A DDP wrapper prefixes every state_dict key with `module.`; checkpoints must hold "
         "the unwrapped model so that they load without DDP.",
         "Nothing to do."),
    Rule("DDP104", Severity.INFO, "BatchNorm statistics are per rank",
         "Each rank normalises over its own shard of the batch; with small per-GPU batches "
         "this hurts accuracy.",
         "Run ddpify with --sync-batchnorm to convert to SyncBatchNorm before wrapping."),
    Rule("DDP105", Severity.INFO, "submodule unused in forward: DDP told to expect unused parameters",
         "DDP waits for a gradient for every parameter; one that never receives a gradient "
         "makes the next iteration fail, so the wrap passes find_unused_parameters=True, "
         "which costs an extra pass over the autograd graph each step.",
         "Remove the unused submodule, then drop find_unused_parameters=True."),
    Rule("DDP115", Severity.INFO, "the wrapped model runs twice before one backward: its buffers are not broadcast",
         "A discriminator scoring the real and the fake batch before one backward runs two "
         "forwards. With broadcast_buffers=True (DDP's default) each forward first copies rank 0's "
         "buffers into the module in place; on CUDA, cuDNN's BatchNorm keeps its running statistics "
         "for the backward, so the copy made by the second forward makes that backward fail (\"one of "
         "the variables needed for gradient computation has been modified by an inplace operation\"); "
         "Gloo on the CPU does not show it. The wrap passes broadcast_buffers=False: each rank keeps "
         "its own running statistics, and rank 0's are the ones saved.",
         "Nothing to do; or convert the BatchNorm layers to SyncBatchNorm (--sync-batchnorm)."),
    Rule("DDP106", Severity.EDIT, "device move of the wrapped model dropped",
         "Moving a DDP model (`.cpu()` to save a checkpoint, then `.to(device)` back) gives it "
         "new parameters that DDP's gradient hooks do not watch: gradients stop being "
         "synchronised without an error. The model stays on its device, and a state dict saved "
         "in between is a CPU copy, as the checkpoint was. (A move once training is over that "
         "the model is used after, a forward on CPU inputs, stays, on the module itself: DDP103.)",
         "Nothing to do; load the checkpoint with map_location."),
    Rule("DDP111", Severity.WARNING, "requires_grad of part of the wrapped model changed after the wrap",
         "DDP registers the parameters that require grad when it wraps the model. A part frozen "
         "then and unfrozen later (fine-tuning stages) trains with gradients no rank shares, so "
         "the ranks' copies drift apart without an error; a part frozen later leaves DDP waiting "
         "for gradients that never come (\"Expected to have finished reduction in the prior "
         "iteration\"). Freezing or unfreezing the whole wrapped model at once is safe.",
         "Wrap the model again after the change (`model = DDP(model.module, device_ids=...)`, and "
         "rebuild the optimizer over its parameters), or set requires_grad before the wrap."),
    Rule("DDP119", Severity.WARNING, "the model reaches its device after the place found for its wrap",
         "DDP must wrap a module whose parameters are already on this rank's device; a move after "
         "the wrap, before training, means the wrap holds a CPU module (NCCL refuses it) or "
         "one that DDP's hooks no longer watch. The move is the user's and stays; the wrap "
         "ddpify placed before it is wrong.",
         "Move the wrap after this line by hand (`model = DDP(model, device_ids=[local_rank])`)."),
    Rule("DDP120", Severity.EDIT, "`global` declared for the module's model wrapped in the function that moves it",
         "`model = Net()` at module level, then `def main(): model.to(device); optimizer = ...` with "
         "the training reading the module's `model` (`train()` calls): the wrap goes after the move, "
         "in `main()`. An assignment there would make `model` a local of `main()` (UnboundLocalError "
         "at the move) and leave the functions that read the module's `model` on the raw module, so "
         "`main()` declares `global model`. Only for a function that runs once (called once, not in "
         "a loop): a second call would wrap the wrapper.",
         "Nothing to do."),
    Rule("DDP121", Severity.WARNING, "the module's model is moved in a function that may run more than once",
         "`model` is built at module level and moved (and trained) in a function called more than "
         "once or in a loop: its wrap belongs after the move, but a wrap there rebinds the module's "
         "model on every call (a wrapper of the wrapper), and one without `global` makes the name a "
         "local (UnboundLocalError).",
         "Move the model to its device at module level, after it is built (ddpify wraps it there), "
         "or build it in the function that moves it."),
    Rule("DDP122", Severity.WARNING, "the module's model is a placeholder no single function builds once",
         "`model = None` at module level and `def build_model(): global model; model = Net().to(device)`: "
         "the model is built in that function, and ddpify wraps it there, after its move. When several "
         "functions bind it under `global`, or the one that does may run more than once, no place wraps it "
         "once; a wrap after the placeholder would wrap None.",
         "Wrap it by hand once, after it is built and moved: `model = DDP(model, device_ids=[local_rank])`."),
    Rule("DDP126", Severity.EDIT, "a move of the model a function is handed runs only while it is not the DDP wrapper",
         "`def train_fn(model, ...): model.to(device)` called every epoch: the model is wrapped once, "
         "in the caller before the epoch loop, after that move (made there too when the caller "
         "does not move it), instead of a new DDP on every call. The function's move stays, under "
         "`if not isinstance(model, DDP):`: a wrapper is on its device already, and moving it or "
         "the module it holds after the wrap replaces the parameters DDP's hooks watch; a plain "
         "module (plain `python`, or another model handed in) is moved as before.",
         "Nothing to do."),
    Rule("DDP944", Severity.WARNING, "the model is moved and wrapped anew on every call of a loop",
         "`def train_fn(model, ..., device): model.to(device)` called in the epoch loop, where "
         "ddpify could not make that move before the loop in the caller (DDP126): the function "
         "rebinds the device it moves to, or the move reads values the caller does not hold. The "
         "wrap stays after the function's move, so each call builds a new DistributedDataParallel "
         "(a broadcast of every parameter and a new reducer) around the module the previous one "
         "wraps, and the move runs on that module after its wrap.",
         "Move the model to its device in the caller, before the loop (`model.to(device)`): "
         "ddpify then wraps it there once."),
    Rule("DDP903", Severity.WARNING, "could not find the model to wrap, or where it reaches its device",
         "DDP must wrap the model after it is on its device and before training; ddpify "
         "could not tell where that is, or which module an optimizer trains (its parameters "
         "come from `models[i].parameters()` or raw tensors). Without a wrap every rank trains "
         "its own copy and the copies drift apart.",
         "Wrap the model yourself: `model = DDP(model, device_ids=[local_rank])`; for raw "
         "tensors, all-reduce their gradients before each step."),
)


def plan(facts: Facts, edits: Edits, setup: Plan) -> None:
    _replace_data_parallel(facts, edits)
    _report_gradient_penalties(facts, edits)
    if facts.batchnorm_calls and not edits.options.sync_batchnorm:
        edits.report("DDP104", facts.batchnorm_calls[0])
    for optimizer in facts.optimizers_without_model:
        # Each rank would train its own copy with nothing to sync the gradients: never exit 0.
        params = edits.code(optimizer.args[0].value) if optimizer.args else "none given"
        edits.report("DDP903", optimizer, f"could not find which module this optimizer trains (parameters: "
                     f"`{params}`): wrap that module in DDP by hand, or all-reduce these gradients")
    _report_optimized_collections(facts, edits)
    _report_parts_called_apart(facts, edits)
    for call, value in facts.models_handed_unnamed:
        _wrap_or_report_handed_unnamed(facts, edits, setup, call, value)
    _unwrap_state_of_trainers_made_here(facts, edits, setup)
    if setup.library:
        _unwrap_models_handed_in(facts, edits, setup)
    elif facts.training_helper_calls and not facts.models and not (
            facts.helpers_build_optimizer or facts.helpers_move_models):
        _report_model_trained_out_of_sight(facts, edits)
    for model in facts.models:
        if _handed_in_to_library(facts, setup, model):
            continue  # a model its caller hands in: the caller wraps it where it reaches its device
        if model.name in facts.models_moved_elsewhere or _unwrapped_after_a_base_wrap(facts, edits, model) \
                or _reported_container_never_called(facts, edits, model):
            # The Trainer it is handed to moves it to its device, and wraps it there; or a
            # base class of another module does, where it moves it; or no wrap of it would run.
            continue
        model = _where_the_global_is_bound(facts, model)
        handed = [] if setup.library else _handed_in_by_callers(facts, model)
        for caller_model in handed:
            if all(known.name != caller_model.name or known.function is not caller_model.function
                   for known in facts.models):
                _wrap(facts, edits, setup, caller_model)
        if not handed:
            _wrap(facts, edits, setup, model)
    _unwrap_where_data_parallel_went(facts, edits)


def _where_the_global_is_bound(facts: Facts, model: Model) -> Model:
    """Rule (dominance, DESIGN §2.9): `net` built and moved at module level (`if use_cuda:
    net.cuda()`, after the `if args.resume:` / `else:` that makes it), and trained by `def
    train(epoch):`, which builds its optimizer over `net.parameters()` on every call and
    never binds `net`: the function reads the module's model. Its wrap goes where the module
    binds and moves it, after the join of those branches, once: a wrap inside `train()` would
    make `net` a local name of the function (UnboundLocalError at its first read) and wrap
    again on every call. The model is the module's (or the enclosing function's), with the
    same optimizer."""
    if not read_from_the_scope_around(facts, model):
        return model
    # (`def main(): net.cuda(); train(epoch)`: where it moves; a global wrapped there, DDP120.)
    scope = where_the_read_model_moves(facts, model) or facts.function_of(cast(cst.FunctionDef, model.function))
    return Model(model.name, model.optimizer_statement, scope, model.moved_in_call)


def _unwrapped_after_a_base_wrap(facts: Facts, edits: Edits, model: Model) -> bool:
    """Rule: `self.model` trained in `Exp_Main.train()`, where `Exp_Main` derives from
    `Exp_Basic` of another module of the project, whose __init__ moves it (`self.model =
    self._build_model().to(self.device)`), and nothing of `Exp_Main` moves it: that module
    wraps it after its move (control._note_models_trained_by_derived_classes there), which
    runs before any method here. Here it may be the DDP wrapper, so its state dict and its
    own attributes are read through `.module` (as after a wrap at the top of the class)."""
    owner = facts.class_of(model.function)
    if owner is None or not model.name.startswith("self.") or model.name.count(".") != 1 \
            or model.name[len("self."):] not in facts.wrapped_in_bases.get(owner.name.value, set()):
        return False
    _unwrap_attributes(facts, edits, model, owner)
    _unwrap_module_accesses(facts, edits, model)
    return True


def _wrap_or_report_handed_unnamed(facts: Facts, edits: Edits, setup: Plan, call: cst.Call,
                                   value: cst.BaseExpression) -> None:
    """`trainer.fit(model.to(DEVICE), loader)`, where `fit`, in another module, builds the
    optimizer over what it is handed: the move is hoisted before the call and the wrap follows
    it (_hoistable_move); any other value made or moved in the call is reported."""
    hoisted = _hoistable_move(facts, call, value)
    if hoisted is not None:
        _wrap(facts, edits, setup, Model(hoisted, facts.statement_of(call), facts.function_of(call),
                                         cast(cst.Call, value)))
        return
    moved = _chain_base(value) if _moved_value(facts, value) else None
    fix = (f"move it on a line of its own before the call (`{edits.code(moved)} = {edits.code(value)}`) "
           f"and hand in `{edits.code(moved)}`" if moved is not None and dotted_name(moved) is not None
           else "name it before the call, move it and wrap it in DDP there")
    edits.report("DDP903", call, f"`{edits.code(call.func)}()` builds the optimizer over `{edits.code(value)}`, "
                 f"a model made or moved inside the call, with no line between its move and the "
                 f"hand-off for the DDP wrap: {fix}")


def _report_model_trained_out_of_sight(facts: Facts, edits: Edits) -> None:
    """`trainer = Trainer(Detector()).to(device)` ... `trainer.train_step(x, y)`: the steps
    run in another module of the project, which builds no optimizer of its own and moves no
    model it is handed (either would name the model it wraps there), and this script names
    no model either. Nothing would be wrapped
    and every rank would train its own copy: say so, at the first training call, rather
    than exit 0."""
    call = facts.training_helper_calls[0]
    edits.report("DDP903", call, f"the training steps run in `{edits.code(call.func)}()`, in another module, "
                 f"on a model this script does not name: wrap that model in DDP by hand, after it "
                 f"reaches its device and before the first step")


def _handed_in_by_callers(facts: Facts, model: Model) -> list[Model]:
    """`def train(model, loader): optimizer = SGD(model.parameters())` called as
    `train(net, loader)` after `net = Net().to(device)`: where a model reaches its device is
    found on the value, followed back through the call arguments to the caller, not where
    its optimizer is built. The wrap goes in each caller, after the move and before the call
    (the optimizer then takes the same parameters through the wrapper). Empty when the
    function builds or moves the model itself, or a caller hands in no plain name."""
    function = model.function
    if function is None or model.name not in parameter_names(function):
        return []
    if any(facts.function_of(statement) is function and (
            _assigns(statement, model.name) or _moves(statement, model.name))
           for statement in facts.statements_touching.get(model.name, ())):
        return []
    found: list[Model] = []
    for call in facts.calls_of(function):
        argument = handed_for(call, function, model.name)
        hoisted = _hoistable_move(facts, call, argument) if argument is not None else None
        hoisted = hoisted or _hoistable_factory(facts, call, argument, model.name)
        name = hoisted or (dotted_name(argument) if argument is not None else None)
        if name is None or name.startswith("self."):
            return []
        caller = facts.function_of(call)
        moved_in_call = cast(cst.Call, argument) if hoisted else None
        if all(each.name != name or each.function is not caller for each in found):
            # once, however often it is handed
            found.append(Model(name, facts.statement_of(call), caller, moved_in_call))
    return found


def _hoistable_factory(facts: Facts, call: cst.Call, argument: Optional[cst.BaseExpression],
                       parameter: str) -> Optional[str]:
    """Rule: `model = fit(make_model(), loader)`, where `make_model`, a function of this file,
    returns its model already on its device (`return Net().to(device)`, or `net =
    Net().to(device)` ... `return net`) and `fit` trains what it is handed: the model reaches
    its device inside the call, as in _hoistable_move. The factory's call goes onto a line of
    its own before the call, the wrap follows it and the call hands in the name: the name the
    statement assigns (`model`, `final_model`: rebound by the statement anyway) unless the call
    reads it, else the parameter's name where nothing there reads it, else a free name after
    it. Only for a call that is the statement (or the value it assigns or returns); the name
    given, else None."""
    if not (isinstance(argument, cst.Call) and isinstance(argument.func, cst.Name)
            and argument.func.value in facts.functions):
        return None
    factory = facts.functions[argument.func.value]
    if facts.class_of(factory) is not None or not _returns_moved_models(facts, factory):
        return None
    statement = facts.statement_of(call)
    small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 else None
    if not isinstance(small, (cst.Expr, cst.Assign, cst.AnnAssign, cst.Return)) or small.value is not call:
        return None
    if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name) \
            and small.targets[0].target.value not in names_in(call):
        return small.targets[0].target.value
    return parameter if _unused_where_called(facts, facts.function_of(call), parameter) \
        else facts.free_name(parameter)


def _unused_where_called(facts: Facts, caller: Optional[cst.FunctionDef], name: str) -> bool:
    """The name may be bound where the call is without changing what any code reads: in a
    function, it appears nowhere in it; at module level, nowhere outside functions, and every
    function that mentions it binds its own (a parameter, or a plain assignment)."""
    if caller is not None:
        return name not in names_in(caller)
    for statement in facts.module.body:
        if isinstance(statement, cst.FunctionDef):
            continue
        if not isinstance(statement, cst.ClassDef) and name in names_in(statement):
            return False
    for function in find_all(facts.module, cst.FunctionDef):
        if name in names_in(function.body) and name not in parameter_names(function) and not any(
                isinstance(target.target, cst.Name) and target.target.value == name
                for assign in find_all(function.body, cst.Assign, into_functions=False) for target in assign.targets):
            return False
    return True


def _returns_moved_models(facts: Facts, function: cst.FunctionDef) -> bool:
    """Every return of the function hands back a model on its device: a `.to(...)`/`.cuda()`
    of it, or a name the function moves (`net = Net().to(device)`, `net.to(device)`)."""
    def a_move(value: Optional[cst.BaseExpression]) -> bool:
        return isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) \
            and value.func.attr.value in ("to", "cuda")

    returns = find_all(function.body, cst.Return, into_functions=False)
    moved = {name for name, moves in facts.device_moves.items()
             if any(facts.function_of(move) is function for move in moves)}
    moved |= {target.target.value for assign in find_all(function.body, cst.Assign, into_functions=False)
              if a_move(assign.value) for target in assign.targets if isinstance(target.target, cst.Name)}
    return bool(returns) and all(
        a_move(each.value) or isinstance(each.value, cst.Name) and each.value.value in moved for each in returns)


def _hoistable_move(facts: Facts, call: cst.Call, argument: Optional[cst.BaseExpression]) -> Optional[str]:
    """Rule: `fit(model.to(device), loader)`, where `fit` trains what it is handed: the model
    reaches its device inside the call, with no line between the move and the hand-off for
    the wrap. The move goes onto a line of its own before the call (`model =
    model.to(device)`, the user's move kept, and still returning the module), the wrap
    follows it and the call hands in `model`. Only for a plain name moved by `.to()` or
    `.cuda()` as the argument itself, in a call that is the statement (or the value it
    assigns or returns): the name given, else None."""
    if not (isinstance(argument, cst.Call) and isinstance(argument.func, cst.Attribute)
            and argument.func.attr.value in ("to", "cuda") and isinstance(argument.func.value, cst.Name)):
        return None
    statement = facts.statement_of(call)
    small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 else None
    if not isinstance(small, (cst.Expr, cst.Assign, cst.AnnAssign, cst.Return)) or small.value is not call:
        return None
    return argument.func.value.value


def _wrap(facts: Facts, edits: Edits, setup: Plan, model: Model) -> None:
    if _reported_moved_by_an_object_it_is_handed_to(facts, edits, setup, model):
        return
    followed = _follow_the_move(facts, edits, setup, model)
    if followed is None:
        return
    anchor, model = followed
    entry: Optional[str] = None
    loop = _loop_binding(facts, model)
    if loop is not None:
        found = _dict_entry_moved_in(facts, loop, model.name)
        if found is None or anchor is not loop or edits.options.fsdp2:
            # A wrap of a loop variable rebinds the variable only: the training reads the
            # container, whose entries would stay unwrapped while every rank trains alone.
            container = _iterated_container(loop) or "models"
            edits.report("DDP903", loop, f"`{model.name}` is a loop variable: a wrap of it would leave the "
                         f"models the training reads unwrapped; wrap each entry yourself "
                         f"(`{container}[key] = DDP({container}[key], ...)`)")
            return
        entry, anchor = found
    if anchor is None:
        moving = [facts.statement_of(call) for call in facts.device_moves.get(model.name, ())]
        move = _moved_first_in_training(facts, model, _training_start(facts, model), moving)
        edits.report("DDP903", model.optimizer_statement, (
            f"could not find where `{model.name}` reaches its device: wrap it in DDP by hand") if move is None else (
            f"`{model.name}` first reaches its device inside the training (line {facts.line_of(move)}): move it "
            f"before the training loop (`{model.name}.to(device)`), where ddpify can wrap it in DDP"))
        return
    anchor = lazy_layers.after_the_first_forward(facts, model, anchor)
    condition = _entry_condition(facts, edits, model, anchor)
    if condition is False or _reported_moved_with_its_holder(facts, edits, model, anchor) \
            or _reported_moved_after_the_anchor(facts, edits, model, anchor) \
            or lazy_layers.reported_lazy(facts, edits, model, anchor):
        return
    if not setup.sees_setup(facts, anchor):
        if edits.options.fsdp2:
            edits.imports.add("dist")
            sharding.shard(facts, edits, setup, model, anchor, "dist.is_initialized()")
            return
        _wrap_out_of_setup(facts, edits, setup, model, anchor, condition)
        return
    if edits.options.fsdp2:
        # The model stays the model: sharded in place, no wrapper and no `.module`.
        sharding.shard(facts, edits, setup, model, anchor, "distributed")
        setup.wrapped_models += 1
        return
    # DDP waits for a gradient from every parameter unless told some may not come.
    extra = ", find_unused_parameters=True" if _report_parameters_without_gradients(facts, edits, model, anchor) else ""
    extra += _keep_buffers_where_run_twice(facts, edits, model)
    code = _wrap_statement(facts, setup, model, anchor, edits.options.sync_batchnorm, extra, condition)
    if entry is None and not _declared_global_where_wrapped(facts, edits, model, anchor):
        return
    if entry is not None:
        code = code.replace(f"{model.name} = DDP(", f"{entry} = DDP(", 1)
    _insert_wrap(facts, edits, model, anchor, edits.statements(_when_trainable(facts, code, model)))
    early_copies.sync_copies_made_before_the_wrap(facts, edits, setup, model, anchor,
                                                  lambda name: _derivations(facts, name),
                                                  _training_start(facts, model))
    others = _wrap_in_other_branches(facts, edits, model, anchor, code) if entry is None else []
    edits.imports.add("DDP")
    edits.report("DDP101", anchor)
    setup.wrap_points[model.name] = anchor
    setup.wrapped_models += 1
    moved_each_call.report_wrapped_on_every_call(facts, edits, model, anchor)
    _report_training_around_the_wrapper(facts, edits, model)
    _drop_moves_after_wrap(facts, edits, model, anchor)
    moved_each_call.guard_moves_in_callees(facts, edits, model, anchor)
    _unwrap_once_training_is_over(facts, edits, model, anchor)
    _unwrap_attributes(facts, edits, model, anchor)
    _unwrap_module_accesses(facts, edits, model)
    _report_parts_frozen_after_wrap(facts, edits, model, anchor)
    _unwrap_where_returned(facts, edits, model)
    _after_wraps_in_other_branches(facts, edits, model, others)
    part_runs.keep_parts_run_in_training(facts, edits, model, facts.model_holders(model), anchor)
    _report_backwards_sharing_a_forward(facts, edits, model)


def _declared_global_where_wrapped(facts: Facts, edits: Edits, model: Model, anchor: Statement) -> bool:
    """Rule (DESIGN §2.8, §2.9): `model = Net()` at module level, moved in `def main():` (which
    never binds it) and trained there or by functions reading the module's `model`: the wrap
    follows the move, in `main()`, and rebinds the module's name, so `main()` declares `global
    model` (DDP120): without it the assignment makes `model` a local of `main()`
    (UnboundLocalError at the move) and `train()` would read the raw module. Only for a function
    of the module that runs once (one call, in no loop, from the module level or the function
    that calls it once): else a second call wraps the wrapper, reported (DDP121), no wrap.
    False when the wrap must not be placed."""
    function = facts.function_of(anchor)
    if function is None or "." in model.name or model.name in names_bound_in(function) \
            or model.name in parameter_names(function):
        return True  # the model is the function's own (or the module's, wrapped at module level)
    if not any(facts.function_of(statement) is None and model.name in assigned_names(statement)
               for statement in facts.statements_touching.get(model.name, ())):
        return True  # a closure's model, or one this file never binds at module level
    if any(model.name in (item.name.value for item in declared.names if isinstance(item.name, cst.Name))
           for declared in find_all(function.body, cst.Global, into_functions=False)):
        return True  # `global model` already
    if facts.function_of(function) is not None or facts.class_of(function) is not None or not _runs_once(
            facts, function):
        edits.report("DDP121", anchor, f"`{model.name}` is the module's, moved here in `{function.name.value}()`, "
                     f"which may run more than once: move it at module level after it is built, where ddpify "
                     f"wraps it once")
        return False
    body = function.body.body if isinstance(function.body, cst.IndentedBlock) else ()
    first = next((statement for statement in body if not _a_docstring(statement)), None)
    if first is None:
        return True
    declaration = edits.statement(f"global {model.name}  # the wrap below rebinds the module's model")
    edits.insert_before(first, Insertion([declaration]))
    edits.report("DDP120", anchor)
    return True


def _runs_once(facts: Facts, function: cst.FunctionDef) -> bool:
    """One call of the function in the file, in no loop, made at module level or by a function
    that itself runs once."""
    calls = facts.calls_of(function)
    if len(calls) != 1 or facts.within_a_loop(calls[0]):
        return False
    caller = facts.function_of(calls[0])
    return caller is None or caller is not function and _runs_once(facts, caller)


def _a_docstring(statement: cst.BaseStatement) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 and isinstance(
        statement.body[0], cst.Expr) and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString))


def _reported_moved_after_the_anchor(facts: Facts, edits: Edits, model: Model, anchor: Statement) -> bool:
    """Rule: nothing of the user's is deleted, and the wrap comes after every move. A move to
    the device after the place found for the wrap and before the training (`self.net` built
    in a Solver's __init__, moved at the top of its `train()`) is where the model first
    reaches its device, not a round trip for a checkpoint (DDP106): a wrap at the anchor
    would hold a CPU module, and dropping the move would keep it there. No wrap: DDP119."""
    training = _training_start(facts, model)
    for call in facts.device_moves.get(model.name, ()):
        if _to_cpu(call) or _before_wrap(facts, call, anchor) or _rebound_since_wrap(facts, call, model.name, anchor):
            continue
        if not model.name.startswith("self.") and facts.function_of(call) is not facts.function_of(anchor):
            continue
        if training is None or facts.start_of(call) < facts.start_of(training):
            edits.report("DDP119", call, (
                f"`{model.name}` reaches its device here, after the place ddpify found for its wrap "
                f"(line {facts.line_of(anchor)}): a wrap there would hold a CPU module; move it where it is "
                f"built, or wrap it by hand once after its first move (not on every call), "
                f"`{model.name} = DDP({model.name}, device_ids=[local_rank])`"))
            return True
    return False


def _wrap_in_other_branches(facts: Facts, edits: Edits, model: Model, anchor: Statement, code: str) -> list[Statement]:
    """The same wrap after each anchor of _anchors_in_other_branches; those anchors."""
    if model.moved_in_call is not None:
        return []
    others = _anchors_in_other_branches(facts, model, anchor)
    for other in others:
        edits.insert_after(other, edits.statements(_when_trainable(facts, code, model)))
    return others


def _after_wraps_in_other_branches(facts: Facts, edits: Edits, model: Model, wraps: list[Statement]) -> None:
    """The model wrapped in a branch of its own (_anchors_in_other_branches): what follows
    that wrap reads the wrapper too (`torch.save(model.state_dict(), ...)` in the branch).
    What follows both wraps was changed, and reported, for the first already: said once."""
    for wrap in wraps:
        known = set(edits.diagnostics)
        start = len(edits.diagnostics)
        _drop_moves_after_wrap(facts, edits, model, wrap)
        _unwrap_attributes(facts, edits, model, wrap)
        _report_parts_frozen_after_wrap(facts, edits, model, wrap)
        edits.diagnostics[start:] = [d for d in dict.fromkeys(edits.diagnostics[start:]) if d not in known]


def _anchors_in_other_branches(facts: Facts, model: Model, anchor: Statement) -> list[Statement]:
    """Rule: `if args.mode == "teacher": model = Teacher().to(device); train(model)` / `else:
    model = Student().to(device); train(model)`: each branch of an if (elif, else) that builds
    the model anew and trains it within the branch is a path of its own, which the wrap after
    `anchor` (in another branch) does not reach. Each such branch gets the same wrap, after
    the last statement of the branch that builds or moves the model before the branch
    trains (dominance per branch). A branch whose training shares a statement with the last
    such move (a loop that builds and trains) gets none: the self-check names it."""
    anchors: list[Statement] = []
    for clauses in _if_chains_around(facts, anchor):
        for clause in clauses:
            if facts.ancestor_in(anchor, clause) is not None:
                continue
            found = _anchor_in_branch(facts, model, clause)
            if found is not None:
                anchors.append(found)
    return anchors


def _if_chains_around(facts: Facts, node: cst.CSTNode) -> list[list[cst.BaseSuite]]:
    """The bodies of every if/elif/else chain around `node` inside its function, innermost
    first: `if a: ... elif b: ... else: ...` gives its three bodies."""
    chains: list[list[cst.BaseSuite]] = []
    child, parent = node, facts.parents.get(node)
    while parent is not None and not isinstance(parent, (cst.FunctionDef, cst.ClassDef)):
        if isinstance(parent, (cst.If, cst.Else)) and child is parent.body:
            top = parent if isinstance(parent, cst.If) else facts.parents.get(parent)
            while isinstance(top, cst.If) and isinstance(facts.parents.get(top), cst.If) \
                    and cast(cst.If, facts.parents[top]).orelse is top:
                top = facts.parents[top]  # an elif: the chain starts at the first if
            if isinstance(top, cst.If):
                clauses: list[cst.BaseSuite] = []
                link: Union[cst.If, cst.Else, None] = top
                while link is not None:
                    clauses.append(link.body)
                    link = link.orelse if isinstance(link, cst.If) else None
                if all(clauses[0] is not known[0] for known in chains):
                    chains.append(clauses)
        child, parent = parent, facts.parents.get(parent)
    return chains


def _anchor_in_branch(facts: Facts, model: Model, clause: cst.BaseSuite) -> Optional[Statement]:
    """The statement of `clause` after which the model, built anew in the clause, is on its
    device before the clause trains it; None when the clause does not build it or does not
    train after building it."""
    touching = [statement for statement in facts.statements_touching.get(model.name, ())
                if facts.function_of(statement) is model.function and facts.ancestor_in(statement, clause) is not None]
    built = [statement for statement in touching if _assigns(statement, model.name)]
    if not built:
        return None
    first = min(built, key=facts.start_of)
    training = facts.first_training_call_in(model.function, first)
    if training is None or facts.ancestor_in(training, clause) is None:
        return None
    trains_at = facts.ancestor_in(training, clause)
    reaching = [facts.ancestor_in(statement, clause) for statement in touching
                if _assigns(statement, model.name) or _moves(statement, model.name)]
    before = [statement for statement in reaching
              if statement is not None and facts.start_of(statement) < facts.start_of(training)]
    if not before:
        return None
    last = max(before, key=facts.start_of)
    return None if last is trains_at else cast(Statement, last)


def _insert_wrap(facts: Facts, edits: Edits, model: Model, anchor: Statement, wrap: list[Statement]) -> None:
    """The wrap after its anchor; for a model moved in the call that hands it in
    (_hoistable_move), the move on a line of its own and the wrap before that call, which
    then hands in the name."""
    move = model.moved_in_call
    if move is None:
        if model.moved_by_callee is not None:
            wrap = [edits.statement(model.moved_by_callee), *wrap]
        edits.insert_after(anchor, wrap)
        return
    hoisted = edits.statement(f"{model.name} = {edits.code(move)}")
    edits.insert_before(anchor, Insertion([hoisted, *wrap]))
    edits.expressions[move] = lambda node: cst.Name(model.name)


def _report_parameters_without_gradients(facts: Facts, edits: Edits, model: Model, anchor: cst.BaseStatement) -> bool:
    """Rule: DDP waits, at every step, for a gradient of every parameter of the wrapped model
    that requires one. Where ddpify finds parameters that get none on some step (a submodule
    forward never runs or runs without gradients, one it runs only on some calls, an argument
    that is None on some steps, an output the step leaves out of its loss), the wrap passes
    find_unused_parameters=True and DDP105 says why, wherever the wrap is written. True when
    one was found."""
    unused = _unused_submodules(facts, model, anchor)
    for assign in unused:
        edits.report("DDP105", assign)
    elsewhere = _gradless_parts_elsewhere(facts, model, anchor)
    if elsewhere:
        edits.report("DDP105", anchor, "submodule unused in forward: DDP told to expect unused parameters: "
                     f"{', '.join(elsewhere)}, built by a class of another module of the project, runs "
                     "without gradients (never, only under torch.no_grad(), or cut from the graph by .detach())")
    skipped = _report_arguments_none_on_some_steps(facts, edits, model)
    skipped = skipped or _report_parts_run_on_some_calls(facts, edits, model, anchor)
    skipped = skipped or dropped_outputs.report_outputs_left_out(facts, edits, model, anchor)
    left_out = method_forwards.parts_left_out_of_training(facts, model)
    if left_out:
        edits.report("DDP132", anchor, "submodules the model's training methods never reach: DDP told to expect "
                     f"unused parameters: {', '.join(f'self.{name}' for name in left_out)}")
    return bool(unused or elsewhere or skipped or left_out)


def _keep_buffers_where_run_twice(facts: Facts, edits: Edits, model: Model) -> str:
    """Rule: a wrapped model with BatchNorm that a training step runs twice before one
    backward (a discriminator on the real and the fake batch) passes
    broadcast_buffers=False, and DDP115 says why (repeated_forwards). The extra argument."""
    if not repeated_forwards.holds_batchnorm(facts, model):
        return ""
    second = repeated_forwards.forward_run_twice_before_a_backward(
        facts, {name for _, name in facts.model_holders(model)})
    if second is None:
        return ""
    edits.report("DDP115", second)
    return ", broadcast_buffers=False"


# Beside those, `forward`: `model.forward(x)` on the wrapper is DistributedDataParallel.forward.
_NOT_FORWARD_OR_THE_WRAPPERS = names.NOT_FORWARD | {"forward"}


def _through_the_wrapper(call: cst.Call, holder: str) -> bool:
    """`model(x)` or `model.forward(x)`: a forward DDP runs, and so shares the gradients of."""
    return dotted_name(call.func) in (holder, f"{holder}.forward")


def _report_training_around_the_wrapper(facts: Facts, edits: Edits, model: Model) -> None:
    """Rule: DDP synchronises gradients only for a forward that goes through the wrapper,
    `model(x)`. A model that trains only through its other methods or its entries
    (`mu, logvar = model.encode(x)`, `model.decode(z)`, `nets["enc"](x)` of a ModuleDict) and
    is never called itself would train with no gradient shared (those reads reach the raw
    module), each rank drifting apart without an error: DDP903, at the first such call in a
    training loop. Not when the model is handed to a function of another module, which may
    call it. A call through the wrapper that runs under `torch.no_grad()` (a statistics pass,
    a validation forward, samples drawn for a log) shares no gradient, so it does not count:
    a flow trained on `-model.log_probs(x).mean()`, or a diffusion model on
    `model.training_loss(x)`, whose only `model(...)` is a no-grad pass, is reported too.
    `model.forward(x)` is the wrapper's own forward and counts as a call of it."""
    held = facts.model_holders(model)
    holders = {name for _, name in held}
    if method_forwards.handed_to_a_training_helper(facts, holders):
        return
    if any(method_forwards.called_with_gradients(facts, name) for name in holders):
        _report_steps_around_the_wrapper(facts, edits, model, held)
        return
    if method_forwards.route(facts, edits, model):
        return
    for loop in sorted(facts.training_loops, key=facts.start_of):
        for call in calls_within(loop.body):
            func = call.func
            if isinstance(func, cst.Attribute) and func.attr.value in _NOT_FORWARD_OR_THE_WRAPPERS \
                    or figures.under_no_grad(facts, call):
                continue
            base = func.value if isinstance(func, (cst.Attribute, cst.Subscript)) else None
            # `for layer in model: h = layer(h)` (an nn.ModuleList run a layer at a time).
            looped = module_looped_over(facts.parents, call, func.value) if isinstance(func, cst.Name) else None
            if base is not None and dotted_name(base) in holders or looped in holders:
                no_grad_only = " with gradients on" if any(facts.calls_by_callee.get(name) for name in holders) else ""
                edits.report("DDP903", call, (
                    f"`{model.name}` trains through `{edits.code(func)}(...)`, never as `{model.name}(...)`"
                    f"{no_grad_only}: DDP shares gradients only for a forward through the wrapper, so every rank "
                    f"would train its own copy; call the model itself (route the calls through its forward), or "
                    f"wrap the parts that run in DDP by hand"))
                return


def _report_steps_around_the_wrapper(facts: Facts, edits: Edits, model: Model, held: set[Holder]) -> None:
    """Rule: the same for one training step. A function that holds the model or is handed it
    (`def adversarial_step(net, opt): fake = net.sample(32); ...; loss.backward(); opt.step()`)
    and takes its own backward, reaching the model there only through its other methods with
    gradients on, never calling it, steps on gradients DDP never shares: that backward comes
    after no forward through the wrapper, so DDP's hooks ignore it and the ranks drift apart
    silently, though another function calls the model (DDP903, at the first such call).
    Calls under `torch.no_grad()` (samples drawn for a log) train nothing."""
    backwards = {facts.function_of(call) for call in facts.training_calls
                 if isinstance(call.func, cst.Attribute) and call.func.attr.value == "backward"}
    steps = {(f, n) for f, n in held if f is not None}
    for function, name in list(steps):
        owner = facts.class_of(function) if name.startswith("self.") else None
        if owner is not None:  # `self.model`: every method of the class holds it
            steps |= {(method, name) for method in owner.body.body if isinstance(method, cst.FunctionDef)}
    for function, name in sorted(steps, key=lambda step: facts.start_of(step[0])):
        if function not in backwards:
            continue
        own = [call for call in calls_within(function.body) if facts.function_of(call) is function]
        if any(_through_the_wrapper(call, name) and not figures.under_no_grad(facts, call) for call in own):
            continue
        for call in own:
            func = call.func
            if isinstance(func, cst.Attribute) and func.attr.value not in _NOT_FORWARD_OR_THE_WRAPPERS \
                    and dotted_name(func.value) == name and not figures.under_no_grad(facts, call):
                edits.report("DDP903", call, (
                    f"`{function.name.value}` trains `{model.name}` through `{edits.code(func)}(...)` with its own "
                    f"backward, never calling `{name}(...)`: DDP shares gradients only for a forward through the "
                    f"wrapper, so every rank would step on its own gradients there; route the call through the "
                    f"model's forward, or wrap the part that runs in DDP by hand"))
                return


def _unwrap_where_returned(facts: Facts, edits: Edits, model: Model) -> None:
    """Rule: a function that wraps the model and returns it (`return model`, or `return
    model, loss` unpacked as `net, last = fit(...)`) hands its caller the DDP wrapper: the
    caller's name reads the raw module after the call as the model's own name does after
    the wrap (`net.state_dict()` saved without a `module.` prefix)."""
    if model.function is None or model.name.startswith("self."):
        return
    sites = facts.returned_to_sites(model.name, model.function)
    if _returned_as_hoisted(facts, model):
        sites += facts.results_assigned(model.function)
    for holder, call in sites:
        if holder == model.name:
            continue  # the model's own name: its reads are unwrapped already, wherever they are
        _unwrap_attributes(facts, edits, Model(holder, model.optimizer_statement, facts.function_of(call)),
                           facts.statement_of(call))


def _returned_as_hoisted(facts: Facts, model: Model) -> bool:
    """`return fit(make_model(), loader)` whose factory call is hoisted (_hoistable_factory)
    and whose `fit` returns what it is handed: the function returns the wrapped model."""
    statement = model.optimizer_statement
    small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 else None
    return model.moved_in_call is not None and isinstance(small, cst.Return) and isinstance(small.value, cst.Call) \
        and facts.hands_back(small.value, model.moved_in_call)


def _report_parts_frozen_after_wrap(facts: Facts, edits: Edits, model: Model, wrap: cst.BaseStatement) -> None:
    """`for p in model.backbone.parameters(): p.requires_grad = True` at epoch 2,
    `model[0].requires_grad_(False)`, or `if "head" not in name: p.requires_grad = ...` in a
    loop over the model's named_parameters(), after the wrap: DDP's set of synchronised
    parameters is fixed at the wrap (DDP111). The whole model toggled at once
    (`netG.requires_grad_(not warmup)`, a GAN's `for p in netD.parameters(): ...`) is safe:
    all of it is registered, and a step without any of its gradients reduces nothing."""
    if not facts.freezes_parameters:
        return
    if _report_unfrozen_after_a_wrap_it_skipped(facts, edits, model, wrap):
        return
    for node in freezing.requires_grad_changes(facts.module):
        if _before_wrap(facts, node, wrap) or _rebound_since_wrap(facts, node, model.name, wrap):
            continue
        if facts.function_of(node) is not facts.function_of(wrap) and not model.name.startswith("self."):
            continue  # another function's `model` may be another model
        if _changes_a_part_of(facts, node, model.name):
            edits.report("DDP111", node, (
                f"requires_grad of part of `{model.name}` changed after its wrap (line "
                f"{facts.line_of(wrap)}): DDP syncs only the parameters that required grad when it "
                "wrapped; wrap it again after the change, or change it before the wrap"))
            return
    for call in _helper_calls_changing_a_part(facts, model, wrap):
        edits.report("DDP111", call, (
            f"requires_grad of part of `{model.name}` changed after its wrap (line "
            f"{facts.line_of(wrap)}), in `{dotted_name(call.func)}`: DDP syncs only the parameters that "
            "required grad when it wrapped; wrap it again after the change, or change it before the wrap"))
        return


def _report_unfrozen_after_a_wrap_it_skipped(facts: Facts, edits: Edits, model: Model,
                                             wrap: cst.BaseStatement) -> bool:
    """Rule: `D.requires_grad_(False)` before the wrap (a warm-up that trains G alone), then
    `D.requires_grad_(True)` after it, at epoch k: at the wrap D has nothing to train, so the
    runtime guard leaves it unwrapped, and once unfrozen it trains on every rank with no
    gradient shared (the ranks drift apart silently). DDP111 at the unfreeze. (A whole model
    toggled only after its wrap, a GAN's per-step toggle, is safe: see above.)"""
    function = facts.function_of(wrap)
    toggles = [call for call in facts.calls_by_callee.get(f"{model.name}.requires_grad_", ())
               if facts.function_of(call) is function]
    if not any(_before_wrap(facts, call, wrap) and call.args and is_false(call.args[0].value) for call in toggles):
        return False
    for call in toggles:
        if not _before_wrap(facts, call, wrap) and not (call.args and is_false(call.args[0].value)) \
                and not _rebound_since_wrap(facts, call, model.name, wrap):
            edits.report("DDP111", call, (
                f"`{model.name}` is frozen where it is wrapped (line {facts.line_of(wrap)}), so the wrap leaves it "
                f"out, and it trains unwrapped once this unfreezes it: no gradient shared, the ranks drift apart; "
                f"wrap it before the freeze (its gradients are then shared whenever it trains), or by hand here"))
            return True
    return False


def _helper_calls_changing_a_part(facts: Facts, model: Model, wrap: cst.BaseStatement) -> list[cst.Call]:
    """Rule: the same change made by a function or method that the script calls after the
    wrap, in the wrap's function (any method, for a model kept as `self.X`): a function of
    this file or of a helper module, `set_trainable(model.backbone, True)` whose body sets
    requires_grad of every parameter of what it is handed (part of the model handed in), or
    `unfreeze(model)` whose body changes part of it (`module.backbone.requires_grad_(True)`,
    a loop over `module.backbone.parameters()`); or a method of the model's own class,
    `model.unfreeze_backbone()`, whose body changes part of `self`."""
    found: list[cst.Call] = []
    for call, handed in _calls_changing_requires_grad(facts, model):
        if _before_wrap(facts, call, wrap) or _rebound_since_wrap(facts, call, model.name, wrap):
            continue
        if facts.function_of(call) is not facts.function_of(wrap) and not model.name.startswith("self."):
            continue
        if any(freezing.part_of(value, model.name) or part_only and dotted_name(value) == model.name
               for value, part_only in handed):
            found.append(call)
    return found


def _calls_changing_requires_grad(
        facts: Facts, model: Model) -> Iterable[tuple[cst.Call, list[tuple[cst.BaseExpression, bool]]]]:
    """Each call of a function of this file, of a helper module's function or method, or of
    a method of the model's class defined here, that changes requires_grad of what it is
    handed: the values handed in (the object for `self`), each with whether only part of it."""
    yield from facts.helper_grad_changes.items()
    for function in facts.module.body:
        if not isinstance(function, cst.FunctionDef):
            continue
        changed = freezing.parameters_changed(function)
        positional = positional_parameters(function)
        for call in facts.calls_by_callee.get(function.name.value, ()):
            handed = [(value, part_only) for parameter, part_only in changed.items()
                      for value in [argument_for(call, parameter, positional.index(parameter)
                                                 if parameter in positional else None)] if value is not None]
            yield call, handed
    for class_def in facts.module.body:
        if not isinstance(class_def, cst.ClassDef) or not _constructs(facts, model.name, class_def.name.value):
            continue
        for method in class_def.body.body:
            if isinstance(method, cst.FunctionDef) and freezing.parameters_changed(method).get("self"):
                for call in facts.calls_by_callee.get(f"{model.name}.{method.name.value}", ()):
                    yield call, [(cast(cst.Attribute, call.func).value, True)]


def _constructs(facts: Facts, name: str, class_name: str) -> bool:
    """Some value of `name` is an object of `class_name` (`Net()`, `Net().to(device)`)."""
    for value in facts.assigned_values.get(name, ()):
        while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and isinstance(
                value.func.value, cst.Call) and value.func.attr.value in ("to", "cuda", "train", "float"):
            value = value.func.value
        if isinstance(value, cst.Call) and dotted_name(value.func) == class_name:
            return True
    return False


def _changes_a_part_of(facts: Facts, node: freezing.Change, name: str) -> bool:
    """The change reaches part of `name`, not all of it: through an attribute or an index
    of the model, or through the variable of a loop that freezes part of it
    (analysis/freezing.py)."""
    if freezing.part_of(freezing.changed_owner(node), name):
        return True
    parent = facts.parents.get(node)
    while parent is not None and not isinstance(parent, (cst.FunctionDef, cst.Module)):
        if isinstance(parent, cst.For) and freezing.loop_freezes_part_of(parent, name):
            return True
        parent = facts.parents.get(parent)
    return False


def _loop_binding(facts: Facts, model: Model) -> Optional[cst.For]:
    """The for loop whose target binds the model's name (`for name, m in models.items():`),
    when no plain assignment in its function does."""
    scope = model.function.body if model.function is not None else facts.module
    if any(facts.function_of(statement) is model.function and _assigns(statement, model.name)
           for statement in facts.statements_touching.get(model.name, ())):
        return None
    return next((loop for loop in find_all(scope, cst.For, into_functions=False)
                 if model.name in names_within(loop.target)), None)


def _iterated_container(loop: cst.For) -> Optional[str]:
    """`models` for `for m in models`, `models.values()` or `models.items()`."""
    iterated = loop.iter
    if isinstance(iterated, cst.Call) and isinstance(iterated.func, cst.Attribute) and not iterated.args:
        iterated = iterated.func.value
    return dotted_name(iterated)


def _dict_entry_moved_in(facts: Facts, loop: cst.For, name: str) -> Optional[tuple[str, Statement]]:
    """(`models[key]`, the last statement of the loop's body that works on `name`) for
    `for key, name in models.items():` whose body moves `name`: the wrap rebinds the entry
    the training reads, right after the move, never the loop variable."""
    target, iterated = loop.target, loop.iter
    if not (isinstance(target, cst.Tuple) and len(target.elements) == 2
            and all(isinstance(element.value, cst.Name) for element in target.elements)
            and cast(cst.Name, target.elements[1].value).value == name
            and isinstance(iterated, cst.Call) and not iterated.args and isinstance(iterated.func, cst.Attribute)
            and iterated.func.attr.value == "items"):
        return None
    container = _iterated_container(loop)
    body = loop.body
    if container is None or not isinstance(body, cst.IndentedBlock):
        return None
    inside = [statement for statement in facts.statements_touching.get(name, ())
              if facts.ancestor_in(statement, body) is not None]
    if not any(_moves(statement, name) for statement in inside):
        return None
    last = max((cast(Statement, facts.ancestor_in(statement, body)) for statement in inside), key=facts.start_of)
    key = cast(cst.Name, target.elements[0].value).value
    return f"{container}[{key}]", last


def _wrap_statement(facts: Facts, setup: Plan, model: Model, anchor: Statement, sync_batchnorm: bool,
                    extra: str, condition: Optional[Union[str, bool]] = None) -> str:
    """The wrap, under `if distributed and {condition}:` where the model reaches its device
    only under that condition (_entry_condition)."""
    code = _unconditional_wrap(facts, setup, model, anchor, sync_batchnorm, extra)
    if isinstance(condition, str):
        code = code.replace("if distributed:", f"if distributed and {condition}:", 1)
    return code


def _unconditional_wrap(facts: Facts, setup: Plan, model: Model, anchor: Statement, sync_batchnorm: bool,
                        extra: str) -> str:
    if setup.device_elsewhere:
        # On the device another module of the project chose: DDP takes it from the module.
        return WRAP_ON_CPU_CODE.format(model=model.name, extra=extra)
    if setup.cpu_only or _never_moved(facts, model):
        # device_ids names the GPU a module lives on; a model the script never moves
        # stays on the CPU, where DDP takes no device_ids and needs Gloo.
        setup.models_on_cpu += 1
        return WRAP_ON_CPU_CODE.format(model=model.name, extra=extra)
    return _wrap_code(facts, anchor, model.name, setup.device_type, sync_batchnorm and bool(facts.batchnorm_calls),
                      extra)


def _handed_in_to_library(facts: Facts, setup: Plan, model: Model) -> bool:
    """A model of a helper module that its caller hands in and that is not moved here
    (`def train_src(encoder, classifier, loader)` building the optimizer over them): the
    caller wraps it, so here it may be the DDP wrapper."""
    return setup.library and model.function is not None and model.name not in facts.models_moved_here and (
        model.function, model.name) not in facts.parameters_moved_here and handed_in(facts, model.function, model.name)


def _unwrap_models_handed_in(facts: Facts, edits: Edits, setup: Plan) -> None:
    """In a helper module, a model its caller hands in (`Trainer(model, ...)`, stored as
    `self.model`, or a training function's parameter it builds the optimizer over) may be
    the DDP wrapper: its state dict and its own attributes are read through `.module`, and
    a helper that saves or reads it (`save_model(encoder, path)`) gets the raw module, so
    that checkpoints keep the single-GPU keys."""
    own = {model.name for model in facts.models if not _handed_in_to_library(facts, setup, model)}
    for model in facts.models:
        if model.name not in own and model.function is not None:
            _unwrap_for_helpers(facts, edits, model, None)
    for name, reads in sorted(facts.attribute_reads.items()):
        if name in own or name not in facts.module_attributes and not any(
                read.attr.value in MODULE_ONLY_METHODS and _called(facts, read)
                or _weights_loaded_elsewhere(facts, read) for read in reads) and not _state_dict_of_a_called_module(
                facts, name, reads) and not _own_method_of_a_called_module(facts, name, reads):
            continue
        functions = [function for function in map(facts.function_of, reads) if function is not None]
        if not functions or not all(handed_in(facts, function, name) for function in functions):
            continue
        _read_through_module(facts, edits, name, reads)
        for value in _type_reads(facts, name):
            edits.expressions[value] = _unwrapped(name, edits, _quote_for(facts, value))
            edits.report("DDP103", value)
    _unwrap_attributes_of_objects_handed_in(facts, edits)


def _state_dict_of_a_called_module(facts: Facts, name: str, reads: Iterable[cst.Attribute]) -> bool:
    """`self.model(x)` and `torch.save(self.model.state_dict(), path)` on a value the caller
    hands in (`Solver(net, loader, opt)` keeps it as `self.model`): something that is called
    and has a state dict is a module, which the caller may have wrapped, so its state dict is
    read through `.module` (an optimizer or a scheduler is never called)."""
    return name in facts.calls_by_callee and any(
        read.attr.value in _STATE_DICT_METHODS and _called(facts, read) for read in reads)


def _own_method_of_a_called_module(facts: Facts, name: str, reads: Iterable[cst.Attribute]) -> bool:
    """`hidden = decoder.init_hidden(1)` then `output, hidden = decoder(inp, hidden)` in a
    helper module's `generate(decoder, ...)`, which the training script calls with its
    model: something called for its output that also has a method of its own called is a
    module the caller may have wrapped, and DDP has no `init_hidden` (an AttributeError on
    every rank at the first sample). Its methods are read through `.module`; the methods the
    wrapper has itself (`.train()`, `.to()`) do not count."""
    return name in facts.calls_by_callee and "." not in name and any(
        _called(facts, read) and read.attr.value not in names.WRAPPER_ATTRIBUTES for read in reads)


def _unwrap_attributes_of_objects_handed_in(facts: Facts, edits: Edits) -> None:
    """`def on_epoch_end(self, trainer): torch.save(trainer.model.state_dict(), path)` in a
    helper module, where a class of the project keeps the model it moves (and so wraps) as
    `self.model`: the object handed in may be that class's instance, so `trainer.model` may
    be the DDP wrapper. Its state dict and its own attributes are read through `.module`
    (the same module with or without the wrap), so that checkpoints keep the single-GPU keys.
    Only for `param.X` with `param` a parameter of every function that reads it, never the
    method's own receiver."""
    for name, reads in sorted(facts.attribute_reads.items()):
        owner, _, attribute = name.partition(".")
        if not attribute or "." in attribute or attribute not in facts.moved_self_attributes:
            continue
        functions = [facts.function_of(read) for read in reads]
        if not all(function is not None and owner in parameter_names(function)
                   and owner != receiver_of(facts, function) for function in functions):
            continue
        _read_through_module(facts, edits, name, reads)


def _report_optimized_collections(facts: Facts, edits: Edits) -> None:
    """Rule: an optimizer over the parameters of each module of a collection ddpify cannot
    name (`chain(student.parameters(), *[c.parameters() for c in criterionKD[1:]])`, the
    trainable regressors of a distillation): DDP holds none of them, so their gradients would
    differ on each rank; the loop variable is no model to wrap. Reported (DDP903), never exit 0."""
    for optimizer, collection in facts.optimized_collections:
        edits.report("DDP903", optimizer, f"this optimizer also trains each module of `{edits.code(collection)}`, "
                     f"which ddpify cannot name one by one: wrap each of them in DDP by hand (after it reaches its "
                     f"device), or all-reduce their gradients")


def _unwrap_state_of_trainers_made_here(facts: Facts, edits: Edits, setup: Plan) -> None:
    """Rule: `trainer = Trainer(generator, discriminator, ...)`, a class of another module of the
    project that moves what it keeps as `self.G` (and so wraps it there), then
    `torch.save(trainer.G.state_dict(), path)` here: `trainer.G` is the DDP wrapper, so its
    state dict (saved or loaded) is read through `.module`, and checkpoints keep the
    single-GPU keys. Only the state-dict methods: a call of `trainer.G(z)` stays on the wrapper."""
    if setup.library:
        return  # (a helper module's own objects: _unwrap_models_handed_in)
    made = {id(call) for call in facts.training_constructors}
    for name, reads in sorted(facts.attribute_reads.items()):
        owner, _, attribute = name.partition(".")
        values = facts.assigned_values.get(owner, [])
        if not attribute or "." in attribute or attribute not in facts.moved_self_attributes or not values or not all(
                id(value) in made for value in values):
            continue
        state_reads = [read for read in reads if read.attr.value in _STATE_DICT_METHODS]
        if state_reads:
            _read_through_module(facts, edits, name, state_reads)


def _read_through_module(facts: Facts, edits: Edits, name: str, reads: Iterable[cst.Attribute]) -> None:
    """Each `name.X` read as `getattr(name, "module", name).X` (DDP103), but the wrapper's own
    attributes and reads already behind a check of the wrapper."""
    for access in reads:
        if access.attr.value in names.WRAPPER_ATTRIBUTES or _under_wrapper_check(facts, access, name):
            continue
        edits.expressions[access.value] = _unwrapped(name, edits, _quote_for(facts, access))
        edits.report("DDP103", access)


def _weights_loaded_elsewhere(facts: Facts, read: cst.Attribute) -> bool:
    """`shadow.load_state_dict(net.state_dict())` (an EMA restarted, a target network synced),
    also through a copy (`copy.deepcopy(net.state_dict())`) or a name of the same function
    (`weights = net.state_dict()` ... `target.load_state_dict(weights)`): one module's weights
    loaded into another, so the value read is a module, and the wrapper's state dict, keyed
    `module.*`, would not load. (An optimizer's state dict is copied the same way; for it
    `getattr(opt, "module", opt)` is the optimizer itself.)"""
    call = facts.parents.get(read)
    if read.attr.value != "state_dict" or not isinstance(call, cst.Call) or call.func is not read:
        return False
    node: Optional[cst.CSTNode] = call
    while node is not None and not isinstance(node, cst.BaseSmallStatement):
        parent = facts.parents.get(node)
        if isinstance(parent, cst.Arg) and _loads_state(facts.parents.get(parent)):
            return True
        node = parent
    if not isinstance(node, cst.Assign) or node.value is not call or len(node.targets) != 1:
        return False
    held = dotted_name(node.targets[0].target)
    function = facts.function_of(call)
    return held is not None and any(
        _loads_state(load) and facts.function_of(load) is function
        and any(dotted_name(arg.value) == held for arg in load.args)
        for callee, loads in facts.calls_by_callee.items() if callee.endswith(".load_state_dict") for load in loads)


def _loads_state(node: Optional[cst.CSTNode]) -> bool:
    return isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and \
        node.func.attr.value == "load_state_dict"


def _called(facts: Facts, read: cst.Attribute) -> bool:
    """`model.train()`, not `config.train.lr`: a module's method is called."""
    parent = facts.parents.get(read)
    return isinstance(parent, cst.Call) and parent.func is read


def _unwrap_for_helpers(facts: Facts, edits: Edits, model: Model, wrap: Optional[cst.BaseStatement]) -> None:
    """A helper of the project that saves or reads the model it is handed
    (`utils.save_checkpoint(model, path)`) gets the raw module: its state dict has no
    "module." prefix, whether or not the model was wrapped. One that runs the model but does
    not train with it (generates a sample, reads `model.pos_emb`) gets the raw module where it
    reads the model's own attributes; so does one whose effect ddpify cannot tell that only
    reads them, never running the model (`compute_loss(outputs, targets, model)` reading
    `model.yolo_layers`)."""
    opaque = {call: effects.MIXED for call in facts.opaque_attribute_readers}
    for call, effect in {**opaque, **facts.helper_effects}.items():
        readers = facts.helper_attribute_readers.get(call, set()) | facts.opaque_attribute_readers.get(call, set())
        for position, arg in enumerate(call.args):
            if effect == effects.MIXED and (arg.keyword is not None or position not in readers):
                continue  # it may run the model: the wrapper must take that forward
            if not arg.star and dotted_name(arg.value) == model.name and (
                    wrap is None and facts.function_of(call) is model.function
                    or wrap is not None and not _before_wrap(facts, call, wrap)):
                edits.expressions[arg.value] = _unwrapped(model.name, edits, _quote_for(facts, arg.value))
                edits.report("DDP103", arg.value)
    # `load_checkpoint(path, model, optimizer)` of another module, whose body calls
    # `model.load_state_dict(ckpt["model"])`: after the wrap it gets the raw module, whose keys
    # are the single-GPU checkpoint's (the wrapper's carry a "module." prefix and would not load).
    for call, values in facts.helper_state_loads.items():
        for value in values:
            if value not in edits.expressions and dotted_name(value) == model.name and (
                    wrap is None and facts.function_of(call) is model.function
                    or wrap is not None and not _before_wrap(facts, call, wrap)):
                edits.expressions[value] = _unwrapped(model.name, edits, _quote_for(facts, value))
                edits.report("DDP103", value)


# Builtins whose result shows the module itself: its class, its printed architecture.
_SHOWING_BUILTINS = ("builtins.type", "builtins.print", "builtins.repr", "builtins.str")


def _container_entries(facts: Facts, name: str) -> list[cst.BaseExpression]:
    """Rule: `self.model = nn.ModuleList([self.compress, self.summarizer, self.critic])` (or a
    ModuleDict) after each of them is wrapped would hold the wrappers: its state dict, saved
    or loaded from a single-GPU checkpoint, would carry `module.` in every key. It holds the
    raw modules instead: the same parameters and keys as before, while the forward still
    goes through each wrapper by its own name (a ModuleList or ModuleDict is never called;
    an nn.Sequential is, so its entries stay the wrappers that all-reduce)."""
    found: list[cst.BaseExpression] = []
    for qualified in sorted(names.MODULE_CONTAINERS):
        for call in facts.calls_named.get(qualified, ()):
            for arg in call.args:
                if arg.star or not isinstance(arg.value, (cst.List, cst.Tuple, cst.Dict)):
                    continue
                found += [element.value for element in arg.value.elements
                          if isinstance(element, (cst.Element, cst.DictElement))
                          and dotted_name(element.value) == name]
    return found


def _type_reads(facts: Facts, name: str) -> list[cst.BaseExpression]:
    """Reads that show the model itself, which after the wrap would show the DDP wrapper:
    `type(model).__name__` (an "arch" entry of a checkpoint), `print(model)`, `repr(model)`,
    `logger.info(model)` and `f"{model}"` (its architecture, printed once by rank 0). Each
    reads the raw module instead, as the single-GPU script showed it."""
    found = [call.args[0].value for qualified in _SHOWING_BUILTINS for call in facts.calls_named.get(qualified, ())
             if call.args and call.args[0].keyword is None and not call.args[0].star
             and dotted_name(call.args[0].value) == name]
    found += [call.args[0].value for callee, calls in facts.calls_by_callee.items()
              if "." in callee and callee.rsplit(".", 1)[1] in effects.LOG_METHODS for call in calls
              if call.args and call.args[0].keyword is None and not call.args[0].star
              and dotted_name(call.args[0].value) == name]
    return found + list(facts.formatted_values.get(name, ()))


def _entry_condition(facts: Facts, edits: Edits, model: Model, anchor: Statement) -> Optional[Union[str, bool]]:
    """Rule: `if args.critic: models.append(critic)` then `for m in models: m.to(device)`: the
    critic reaches its device only when the test holds, so its wrap, after the loop, runs under
    the same test (`if distributed and args.critic:`): a wrap outside it would wrap a module the
    run left on the CPU, with the GPU's device_ids. The test is read again there, so it must be
    one that gives the same answer: names and attributes compared and combined, none of them
    assigned between the `if` and the wrap. None where the model is moved on every path (no
    condition); the test's code; False where it cannot be repeated (reported: no wrap)."""
    moves = [move for move in facts.device_moves.get(model.name, ()) if facts.function_of(move) is model.function]
    tests = [facts.moved_under.get((model.name, move)) for move in moves]
    if not tests or any(test is None for test in tests):
        return None
    codes = {condition_code(facts.module, *cast(tuple[cst.BaseExpression, bool], test)) for test in tests}
    test = cast(tuple[cst.BaseExpression, bool], tests[0])[0]
    if len(codes) == 1 and not edits.options.fsdp2 and _repeatable(facts, test, anchor):
        return codes.pop()
    edits.report("DDP903", anchor, f"`{model.name}` reaches its device only when "
                 f"`{facts.module.code_for_node(test)}` held where it joined the models the loop moves, "
                 f"a test that may not give the same answer after it: wrap it yourself where it is moved")
    return False


def _repeatable(facts: Facts, test: cst.BaseExpression, anchor: Statement) -> bool:
    """Whether `test` reads only names and attributes (compared, negated, combined, with
    literals) and none of them is assigned between the test and the end of `anchor`."""
    allowed = (cst.Name, cst.Attribute, cst.Comparison, cst.ComparisonTarget, cst.BooleanOperation,
               cst.UnaryOperation, cst.BaseBooleanOp, cst.BaseCompOp, cst.Not, cst.SimpleString, cst.Integer,
               cst.Float, cst.LeftParen, cst.RightParen, cst.Dot, cst.BaseParenthesizableWhitespace, cst.Comment,
               cst.EmptyLine, cst.TrailingWhitespace, cst.Newline)
    nodes: list[cst.CSTNode] = []
    pending: list[cst.CSTNode] = [test]
    while pending:
        node = pending.pop()
        nodes.append(node)
        pending.extend(traversal.children(node))
    if not all(isinstance(node, allowed) for node in nodes):
        return False
    roots = {read.value for read in find_all(test, cst.Name)}
    start, end = facts.start_of(test), facts.end_of(anchor)
    scope = facts.function_of(anchor) or facts.module
    for kind in (cst.AssignTarget, cst.AugAssign, cst.AnnAssign, cst.For, cst.AsName, cst.NamedExpr, cst.Del):
        for node in find_all(scope, kind):
            target = getattr(node, "target", None) or getattr(node, "name", None)
            if target is None or not start <= facts.start_of(node) <= end:
                continue
            base = target
            while isinstance(base, (cst.Attribute, cst.Subscript)):
                base = base.value
            if any(read.value in roots for read in find_all(base, cst.Name)):
                return False
    return True


def _when_trainable(facts: Facts, code: str, model: Model) -> str:
    """Where the script freezes parameters, the wrap is decided when it runs: a module with
    no parameter that requires a gradient is left as it is. So too where another module of
    the project freezes them: models cross modules (a factory that freezes the encoder by a
    config flag, a Trainer handed it), so a model wrapped here may have nothing to train,
    and DDP raises on it at the wrap. Not for a model only ever built here from a class of
    this file or of a module that freezes nothing, where this file freezes nothing either
    (the trained `transformer` beside a frozen loss network of vgg.py): its parameters all
    require a gradient."""
    if not facts.freezes_parameters and (
            not facts.freezes_parameters_in_project or _built_never_frozen(facts, model)):
        return code
    if not facts.freezes_parameters_in_project and _only_other_modules_frozen(facts, model):
        return code  # `teacher.requires_grad_(False)` beside the student wrapped here
    first_line, rest = code.split("\n", 1)
    condition = first_line[len("if "):-len(":")]
    return (f"{ONLY_IF_TRAINABLE_COMMENT}\n"
            f"if {condition} and any(p.requires_grad for p in {model.name}.parameters()):\n{rest}")


def _only_other_modules_frozen(facts: Facts, model: Model) -> bool:
    """Every requires_grad change of the file works on a module named apart from the model (a
    teacher, a loss network): built by a call of its own, never bound to the model's value, and
    not one the model's value is made from (`student = copy.deepcopy(teacher)`)."""
    held = {name for _, name in facts.model_holders(model)} | {model.name}
    roots: set[str] = set()
    for receiver in facts.frozen_receivers:
        if receiver is None or receiver.split(".", 1)[0] in ("self", "cls"):
            return False
        roots.add(receiver.split(".", 1)[0])
        values = facts.assigned_values.get(receiver, [])
        # `ema = copy.deepcopy(model)` is another module: freezing it leaves the model as it was.
        if not values or not all(isinstance(value, cst.Call) and (
                not _names_read(value) & held or (dotted_name(value.func) or "").endswith("deepcopy"))
                for value in values):
            return False
    return not (roots & held or any(_names_read(value) & roots
                                    for name in held for value in facts.assigned_values.get(name, [])))


def _names_read(value: cst.BaseExpression) -> set[str]:
    """The dotted names an expression reads (`teacher`, `self.net`), with their roots."""
    found = {dotted_name(node) for node in find_all(value, cst.Name)}
    found |= {dotted_name(node) for node in find_all(value, cst.Attribute)}
    return {name for name in found if name is not None}


def _built_never_frozen(facts: Facts, model: Model) -> bool:
    """Every value of the model, wherever it is held, builds an object of a class of this file
    or of a project module that sets requires_grad nowhere (`TransformerNet().to(device)`)."""
    own_classes = {statement.name.value for statement in facts.module.body if isinstance(statement, cst.ClassDef)}
    values = [value for _, name in facts.model_holders(model) for value in facts.assigned_values.get(name, ())]
    for value in values:
        while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and isinstance(
                value.func.value, cst.Call) and value.func.attr.value in _SELF_RETURNING_METHODS:
            value = value.func.value
        if not (isinstance(value, cst.Call) and (
                value in facts.builds_never_frozen or dotted_name(value.func) in own_classes)):
            return False
    return bool(values)


def _reported_moved_by_an_object_it_is_handed_to(facts: Facts, edits: Edits, setup: Plan, model: Model) -> bool:
    """Rule: a model this scope never moves, handed to an object that is then given the
    device (`trainer = Trainer(opt, model, optimizer)`, a class ddpify cannot read, e.g. picked
    from a registry by task name, then `trainer.set_device(opt.device)`), reaches its device
    in there, after any place a wrap here could go: a wrap here would hold CPU weights, and
    the object may wrap what it moves itself (a DDP inside a DDP). Reported (DDP903), left
    unwrapped here."""
    if model.function is None or not _never_moved(facts, model):
        return False
    start = facts.start_of(model.optimizer_statement)
    for assign in facts.own_statements(model.function, cst.Assign):
        value = assign.value
        if len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name) or not isinstance(
                value, cst.Call) or not any(dotted_name(arg.value) == model.name for arg in value.args):
            continue
        holder = assign.targets[0].target.value
        for call in facts.calls_by_callee.get(holder, []) + [
                call for callee, calls in facts.calls_by_callee.items() if callee.startswith(holder + ".")
                for call in calls]:
            if facts.function_of(call) is not model.function or facts.start_of(call) < start:
                continue
            method = call.func.attr.value if isinstance(call.func, cst.Attribute) else None
            if method in ("to", "cuda") or any(dotted_name(arg.value) == setup.device for arg in call.args):
                edits.report("DDP903", call, (
                    f"`{model.name}` is handed to `{edits.code(value.func)}(...)` and reaches its device through "
                    f"`{edits.code(call.func)}(...)`, in code ddpify cannot follow here: a wrap here would come "
                    f"before that move; wrap the module in DDP where it is moved (after "
                    f"`{edits.code(call.func)}`), once"))
                return True
    return False


def _reported_moved_with_its_holder(facts: Facts, edits: Edits, model: Model, anchor: Statement) -> bool:
    holder = _module_holder_moved_after_init(facts, model)
    if holder is not None:
        edits.report("DDP903", anchor, (
            f"`{model.name}` is a part of `{holder}`, an nn.Module that reaches its device when the "
            f"object is moved, after its method has built `{model.name}`: a wrap there would come "
            f"before the move (DDP needs the module on its device); move `{model.name}` to the device "
            f"in the class, or wrap it in DDP by hand after the object is moved"))
    return holder is not None


def _module_holder_moved_after_init(facts: Facts, model: Model) -> Optional[str]:
    """Rule: `self.net`, a part that a class which is itself an nn.Module builds and never
    moves (`class Agent(nn.Module)` holding its network and the optimizer over it), reaches
    its device with the object (`Agent().to(device)`, `agent.cuda()`), after the method that
    built it has returned: no place in the class sees it on its device, and a wrap there
    would hold CPU weights that NCCL cannot broadcast. The class's name, when an object of
    it is moved in this file, or when none is made here (its callers are elsewhere)."""
    owner = facts.class_of(model.function) if model.name.startswith("self.") else None
    if owner is None or owner.name.value not in facts.module_classes:
        return None
    if not _never_moved(facts, model) or facts.device_moves.get("self"):
        return None
    instances = facts._instances_of(owner.name.value)
    if instances and not any(_moved_value(facts, cst.Name(instance)) for instance in instances):
        return None  # every object of it stays where it was made
    return owner.name.value


def _default_device_set_before(facts: Facts, model: Model) -> bool:
    """Rule: `torch.set_default_device(device)` before the model is built (in its function, or
    at module level): the model's parameters are made on that device, as if moved there, so it
    is wrapped with this rank's device_ids on NCCL, not on Gloo as a CPU model."""
    start = facts.start_of(model.optimizer_statement)
    # (Also `torch.set_default_tensor_type("torch.cuda.FloatTensor")`, the older spelling.)
    for call in [*facts.calls_named.get("torch.set_default_device", ()), *gpu_made_the_default(facts)]:
        argument = call.args[0].value if call.args else None
        if argument is None or isinstance(argument, cst.SimpleString) and "cpu" in argument.value:
            continue
        if facts.function_of(call) in (None, model.function) and facts.start_of(call) < start:
            return True
    return False


def _copy_of_a_moved_module(facts: Facts, value: cst.BaseExpression) -> bool:
    """`copy.deepcopy(teacher)` of a module moved in the same function: the copy's parameters
    sit where the original's are (a student copied from a teacher on the GPU)."""
    if not (isinstance(value, cst.Call) and value.args and value in facts.calls_named.get("copy.deepcopy", ())):
        return False
    copied = dotted_name(value.args[0].value)
    return copied is not None and any(
        facts.function_of(move) is facts.function_of(value) and facts.start_of(move) < facts.start_of(value)
        and not _to_cpu(move) for move in facts.device_moves.get(copied, ()))


def _never_moved(facts: Facts, model: Model) -> bool:
    """No `.to()` / `.cuda()` reaches the model anywhere its value goes: neither a move of
    the name (`model.to(device)`) nor one in what it is assigned (`Net().to(device)`, or a
    project function that returns the model it moved, `get_network(args)`), nor one of the
    container it is taken out of (`net = modules["net"]`, see containers.entry_moves)."""
    if model.moved_in_call is not None or _default_device_set_before(facts, model) or _moved_in_parts(
            facts, model) or later_moves.entry_moves_of_containers_holding(
            facts, model, facts.class_of(model.function)):
        # Moved in the call that hands it in, made on its device by a factory, built after
        # `torch.set_default_device(device)`, moved part by part, or moved by a loop over an
        # attribute of its object that holds it (`for net in self.nets.values(): net.cuda()`).
        return False
    for _, name in facts.model_holders(model):
        if facts.device_moves.get(name) or facts.moved_by_helpers.get(name):
            return False
        for value in facts.assigned_values.get(name, ()):
            # calls_within includes the value itself: `Net().to(device)` is a move, and so is
            # `model.to_empty(device=device)`, which makes a model built on the meta device there.
            if any(isinstance(call.func, cst.Attribute) and call.func.attr.value in ("to", "cuda", "to_empty")
                   or call in facts.calls_returning_moved for call in calls_within(value)):
                return False
            container = dotted_name(value.value) if isinstance(value, cst.Subscript) else None
            if container is not None and entry_moves(facts, container, facts.function_of(value)):
                return False
            if _read_from_a_moved_object(facts, value) or _copy_of_a_moved_module(facts, value):
                return False
    # `G, D = nets["G"], nets["D"]`: several models taken out of a container at once.
    for assign in facts.own_statements(model.function, cst.Assign):
        if len(assign.targets) != 1:
            continue
        for target, value in assignment_pairs(assign.targets[0].target, assign.value):
            container = dotted_name(value.value) if isinstance(value, cst.Subscript) else None
            if dotted_name(target) == model.name and (container is not None and entry_moves(
                    facts, container, model.function) or _read_from_a_moved_object(facts, value)):
                return False
    return not _moved_where_handed_in(facts, model)


def _moved_in_parts(facts: Facts, model: Model) -> bool:
    """Rule: `model.encoder.cuda(); model.decoder.cuda()` (or `backbone.cuda()` after `model =
    nn.Sequential(backbone, head)`) in the model's function: its parts reach the device one by
    one, so the model does, and the wrap follows the last of them (_wrap_anchor) with this
    rank's device_ids, on NCCL."""
    return any(facts.function_of(call) is model.function and not _to_cpu(call)
               for part in _parts_of(facts, model) for call in facts.device_moves.get(part, ()))


def _moved_where_handed_in(facts: Facts, model: Model) -> bool:
    """Rule: a model a function or a class of this file is handed (`self.model = model` in a
    Trainer's __init__, a `fit(net, ...)` parameter) reaches its device where its caller
    moves it: `Trainer(Net().to(device), loader)`, `fit(model.to(device), ...)`."""
    for function, name in facts.model_holders(model):
        if function is None:
            continue
        if name.startswith("self."):
            handed = [(method, value.value) for method, assigned in facts.self_assignments.items()
                      for value in assigned.get(name, ()) if isinstance(value, cst.Name)]
        else:
            handed = [(function, name)]
        for method, parameter in handed:
            positional = positional_parameters(method)
            if facts.class_of(method) is not None and positional[:1] == [receiver_of(facts, method)]:
                positional = positional[1:]
            if parameter not in parameter_names(method):
                continue
            owner = facts.class_of(method)
            calls = list(facts.calls_of(method))
            if owner is not None and method.name.value == "__init__":
                calls.extend(facts.calls_by_callee.get(owner.name.value, ()))
            for call in calls:
                value = argument_among(call, parameter, positional)
                if value is not None and _moved_value(facts, value):
                    return True
    return False


def _moved_value(facts: Facts, value: cst.BaseExpression) -> bool:
    """`Net().to(device)` handed in, or a name moved (`model.to(device)`, `model =
    Net().to(device)`) before it is handed in."""
    if any(isinstance(call.func, cst.Attribute) and call.func.attr.value in ("to", "cuda")
           for call in calls_within(value)):
        return True
    name = dotted_name(value)
    return name is not None and (bool(facts.device_moves.get(name)) or any(
        isinstance(call.func, cst.Attribute) and call.func.attr.value in ("to", "cuda")
        for assigned in facts.assigned_values.get(name, ()) for call in calls_within(assigned)))


def _read_from_a_moved_object(facts: Facts, value: cst.BaseExpression) -> bool:
    """`encoder = pipe.encoder` after `pipe = Pipeline().to(device)` or `pipe.cuda()`: an
    object the script moved (a module, or a class whose own `to()` moves its parts, even
    with `setattr`) hands out a part that may be on the device."""
    if not isinstance(value, cst.Attribute):
        return False
    owner = dotted_name(value.value)
    return owner is not None and (bool(facts.device_moves.get(owner)) or any(
        isinstance(call.func, cst.Attribute) and call.func.attr.value in ("to", "cuda")
        or _moved_by_the_init_of(facts, call, value.attr.value)
        for assigned in facts.assigned_values.get(owner, ()) for call in calls_within(assigned)))


def _moved_by_the_init_of(facts: Facts, call: cst.Call, attribute: str) -> bool:
    """Rule: `model = t.model` after `t = Trainer()`, whose `__init__` moves `self.model` to an
    accelerator (`self.model.cuda()`, `self.model = self.model.to(device) if cuda else
    self.model`): the object hands out a module that may be on the device, so its wrap takes
    this rank's device_ids and the group is NCCL's on GPUs, not a CPU model's Gloo."""
    built = dotted_name(call.func)
    for move in facts.device_moves.get(f"self.{attribute}", ()):
        function = facts.function_of(move)
        owner = facts.class_of(function)
        if function is not None and function.name.value == "__init__" and owner is not None \
                and owner.name.value == built and not _to_cpu(move):
            return True
    return False


def _rewrapped_by_a_later_call(facts: Facts, model: Model, anchor: Statement) -> bool:
    """Rule: `self.model = self.model.to(self.device)` at the top of a Trainer's `fit()` or
    `train()`, which the script calls once per epoch: the wrap placed after that move runs on
    every call, and the object keeps what the first call wrapped, so later calls must not
    wrap the DDP module again (DDP(DDP(model)) all-reduces twice and holds a second copy of
    the buckets). A wrap of an attribute in any method but `__init__` (which runs once per
    object) is skipped when the attribute already holds the wrapper."""
    if "." not in model.name:
        return False
    function = facts.function_of(anchor)
    return function is not None and function.name.value != "__init__"


def _wrap_out_of_setup(facts: Facts, edits: Edits, setup: Plan, model: Model, anchor: Statement,
                       condition: Optional[Union[str, bool]]) -> None:
    """The model reaches its device in code that cannot see the setup block (a Trainer's
    __init__): wrap it there when a process group exists. DDP takes the device from the
    module itself when device_ids is None, so no device name is needed."""
    code = WRAP_OUT_OF_SETUP_CODE.format(model=model.name)
    if isinstance(condition, str):
        code = code.replace("if dist.is_initialized():", f"if dist.is_initialized() and {condition}:", 1)
    if _rewrapped_by_a_later_call(facts, model, anchor):
        code = code.replace("dist.is_initialized()", f"dist.is_initialized() and not isinstance({model.name}, DDP)", 1)
    if _report_parameters_without_gradients(facts, edits, model, anchor):
        code = code.replace(f"DDP({model.name})", f"DDP({model.name}, find_unused_parameters=True)")
    code = code.replace(f"DDP({model.name}", f"DDP({model.name}{_keep_buffers_where_run_twice(facts, edits, model)}", 1)
    _insert_wrap(facts, edits, model, anchor, edits.statements(_when_trainable(facts, code, model)))
    early_copies.sync_copies_made_before_the_wrap(facts, edits, setup, model, anchor,
                                                  lambda name: _derivations(facts, name),
                                                  _training_start(facts, model))
    edits.imports.update({"DDP", "dist"})
    edits.report("DDP101", anchor)
    setup.wrap_points[model.name] = anchor
    moved_each_call.report_wrapped_on_every_call(facts, edits, model, anchor)
    _report_training_around_the_wrapper(facts, edits, model)
    _drop_moves_after_wrap(facts, edits, model, anchor)
    moved_each_call.guard_moves_in_callees(facts, edits, model, anchor)
    _unwrap_attributes(facts, edits, model, anchor)
    _unwrap_module_accesses(facts, edits, model)
    _hand_back_the_module(facts, edits, model)


def _report_gradient_penalties(facts: Facts, edits: Edits) -> None:
    """Rule: a second-order gradient (`torch.autograd.grad(..., create_graph=True)`) in a file
    whose models are wrapped is a gradient penalty through a DDP model; its backward on its
    own reaches only part of the parameters (DDP113). Not reported where the penalty is
    summed into a loss with other terms and only that sum is backpropagated (`d_loss = d_real
    + d_fake + lambda_gp * d_loss_gp; d_loss.backward()`): one backward covers every
    parameter. Where ddpify cannot follow the penalty to such a sum, it is reported."""
    if not facts.models:
        return
    for call in facts.calls_named.get("torch.autograd.grad", ()):
        if any(arg.keyword is not None and arg.keyword.value == "create_graph" and not is_false(arg.value)
               for arg in call.args) and not _summed_into_one_backward(facts, call):
            edits.report("DDP113", call)


def _report_backwards_sharing_a_forward(facts: Facts, edits: Edits, model: Model) -> None:
    """Rule (DDP114): two `.backward()` calls in one function with no forward of the wrapped
    model between them, where both losses are computed from the outputs of the forward
    before the first (`out2, out4 = model(x)`; `loss2.backward(retain_graph=True)`;
    `loss4.backward()`, as in multi-scale super-resolution). Under DDP the second backward
    fails: one reduction per forward. A loss computed from a detached output
    (`netD(fake.detach())`, a GAN's discriminator step) does not reach the model, and a
    forward between the two backwards (each GAN phase its own) prepares a new reduction:
    neither is reported. Left as it was: summing the losses changes the float rounding of
    the gradients that plain `python` reproduces."""
    forwards = sorted(facts.calls_by_callee.get(model.name, ()), key=facts.start_of)
    functions = {facts.function_of(call) for call in forwards}
    backwards = sorted((call for call in facts.training_calls
                        if isinstance(call.func, cst.Attribute) and call.func.attr.value == "backward"
                        and facts.function_of(call) in functions), key=facts.start_of)
    for first, second in zip(backwards, backwards[1:]):
        function = facts.function_of(first)
        if facts.function_of(second) is not function:
            continue
        before = [call for call in forwards if facts.function_of(call) is function
                  and facts.start_of(call) < facts.start_of(first)]
        if not before or any(facts.start_of(first) < facts.start_of(call) < facts.start_of(second)
                             for call in forwards):
            continue
        forward = before[-1]
        losses = [(cast(cst.Attribute, call.func).value, call) for call in (first, second)]
        if _reaches(facts, first, second) and all(_computed_from(facts, forward, loss, call) for loss, call in losses):
            edits.report("DDP114", second)


def _reaches(facts: Facts, first: cst.Call, second: cst.Call) -> bool:
    """A path runs `second` after `first`: not when they sit in two branches of one statement
    (`if warmup: loss_pixel.backward(); ... else: loss_g.backward()`), nor when a `continue`,
    `break`, `return` or `raise` follows `first` in a block that `second` is outside of."""
    node: Statement = facts.statement_of(first)
    while True:
        block = facts.block_of(node)
        holder = facts.ancestor_in(second, block)
        if holder is not None:
            return holder is not node
        body = list(block.body)
        if any(isinstance(later, cst.SimpleStatementLine) and any(
                isinstance(small, (cst.Continue, cst.Break, cst.Return, cst.Raise)) for small in later.body)
               for later in body[body.index(node) + 1:]):
            return False
        around = facts.parents.get(block)
        if around is None or isinstance(around, (cst.FunctionDef, cst.ClassDef)):
            return False
        node = facts.statement_of(around)


def _computed_from(facts: Facts, forward: cst.Call, value: cst.CSTNode, at: cst.CSTNode, depth: int = 0) -> bool:
    """`value`, read at `at`, is computed from the forward's output: it reads (not through
    `.detach()`, which cuts the graph) the forward itself, or a name whose last assignment
    before `at` and after the forward is, a few steps back."""
    if value is forward or forward in calls_within(value) and not _detached_within(value, forward):
        return True
    if depth > 4:
        return False
    function = facts.function_of(forward)
    # `out2, out4 = model(x)`: the names the forward's own statement assigns.
    outputs = {name for assign in find_all(facts.statement_of(forward), cst.Assign)
               for target in assign.targets for name in names_within(target.target)}
    for name in _attached_names(value):
        earlier = [assigned for assigned in facts.assigned_values.get(name, ())
                   if facts.function_of(assigned) is function and facts.start_of(assigned) < facts.start_of(at)]
        if not earlier:
            if name in outputs:
                return True
            continue
        last = max(earlier, key=facts.start_of)
        if facts.end_of(last) >= facts.end_of(forward) and _computed_from(facts, forward, last, last, depth + 1):
            return True
    return False


def _detached_within(value: cst.CSTNode, forward: cst.Call) -> bool:
    return any(isinstance(call.func, cst.Attribute) and call.func.attr.value == "detach"
               and forward in calls_within(call.func.value) for call in calls_within(value))


def _attached_names(node: cst.CSTNode) -> list[str]:
    """The dotted names `node` reads, but not through `.detach()`."""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "detach":
        return []
    if isinstance(node, (cst.Name, cst.Attribute)) and dotted_name(node) is not None:
        return [cast(str, dotted_name(node)), *(_attached_names(node.value) if isinstance(node, cst.Attribute) else [])]
    return [name for child in node.children for name in _attached_names(child)]


def _summed_into_one_backward(facts: Facts, call: cst.Call) -> bool:
    """Rule: the call is in a function that returns the penalty (`def gradient_penalty(...):
    ... return ((norm - 1) ** 2).mean()`); the names its callers assign it to have no
    `.backward()` of their own, and a sum that reads one of them is backpropagated
    (`d_loss = ... + lambda_gp * d_loss_gp` then `d_loss.backward()`, or `(loss + gp).backward()`).
    Or the penalty is computed inline (`gradient_penalty = ((grad.norm(2, dim=1) - 1) ** 2).mean()
    * lambda_gp`): every backward that reads it backpropagates a sum in which it is one term
    among others (`d_loss = d_real + d_fake + gradient_penalty; d_loss.backward()`), and there
    is at least one such backward."""
    if not _returned_by_its_function(facts, call):
        return _inline_penalty_summed(facts, call)
    holders = _penalty_holders(facts, call)
    if not holders:
        return False
    sums = _sums_over_the_penalty(facts, holders)
    backwards = [backward for callee, calls in facts.calls_by_callee.items() if callee.endswith(".backward")
                 for backward in calls if isinstance(backward.func, cst.Attribute)]
    receivers = [cast(cst.Attribute, backward.func).value for backward in backwards]
    names = {dotted_name(receiver) for receiver in receivers}
    if names & holders:
        return False
    return bool(names & sums) or any(_a_sum_with_other_terms(receiver, holders | sums) for receiver in receivers)


def _a_sum_with_other_terms(value: cst.BaseExpression, held: set[str]) -> bool:
    """`d_real + d_fake + lambda_gp * gp`: a term reads what `held` holds and another does not."""
    terms = _additive_terms(value)
    return (len(terms) > 1 and any(set(names_within(term)) & held for term in terms)
            and any(not set(names_within(term)) & held for term in terms))


def _sums_over_the_penalty(facts: Facts, holders: set[str]) -> set[str]:
    """Names assigned a sum in which the penalty is one term among others, a few steps on:
    `loss_adv = -real.mean() + fake.mean() + lambda_gp * gp`, then `loss_d = loss_adv +
    lambda_cls * loss_cls`; or two critics' `loss_d = loss_da + loss_db`. The penalty only
    scaled (`weighted_gp = lambda_gp * gp`) stays the penalty: `holders` takes it in (a
    backward of it alone is the penalty's own)."""
    sums: set[str] = set()
    for _ in range(3):
        for name, values in facts.assigned_values.items():
            if name in holders or name in sums:
                continue
            if any(_a_sum_with_other_terms(value, holders | sums) or set(names_within(value)) & sums
                   for value in values):
                sums.add(name)
            elif any(set(names_within(value)) & holders for value in values):
                holders.add(name)
        sums.update(_penalty_added_in_place(facts, holders | sums))
    return sums


def _penalty_added_in_place(facts: Facts, held: set[str]) -> set[str]:
    """`critic_loss = wasserstein`, then `critic_loss += lambda_gp * gp`: a sum, where the name
    held another loss before (a value reading a name the file assigns; not `0`, where the
    penalty would be accumulated alone)."""
    found: set[str] = set()
    for augmented in facts.nodes_of(cst.AugAssign):
        name = dotted_name(augmented.target)
        if name is None or name in held or not isinstance(augmented.operator, (cst.AddAssign, cst.SubtractAssign)) \
                or not set(names_within(augmented.value)) & held:
            continue
        earlier = facts.assigned_values.get(name, ())
        if any(set(names_within(value)) & facts.assigned_values.keys() for value in earlier):
            found.add(name)
    return found


def _derived_in_scope(facts: Facts, call: cst.Call) -> set[str]:
    """The names the call's statement assigns and those computed from them in the same
    function (or at module level), a few steps on."""
    function = facts.function_of(call)
    held = {name for assign in find_all(facts.statement_of(call), cst.Assign)
            for target in assign.targets for name in names_within(target.target)}
    for _ in range(3):
        held |= {name for name, values in facts.assigned_values.items() for value in values
                 if facts.function_of(value) is function and set(names_within(value)) & held}
    return held


def _returned_by_its_function(facts: Facts, call: cst.Call) -> bool:
    function = facts.function_of(call)
    if function is None:
        return False
    held = _derived_in_scope(facts, call)
    return any(set(names_within(each.value)) & held or call in calls_within(each.value)
               for each in facts.own_statements(function, cst.Return) if each.value is not None)


def _additive_terms(value: cst.BaseExpression) -> list[cst.BaseExpression]:
    """`a + b - c` as [a, b, c]; anything else as itself."""
    if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, (cst.Add, cst.Subtract)):
        return _additive_terms(value.left) + _additive_terms(value.right)
    return [value]


def _inline_penalty_summed(facts: Facts, call: cst.Call) -> bool:
    """Rule: each backward in the penalty's scope whose receiver reads the penalty (by name, or
    a name computed from it) backpropagates a sum with a term that does not read it, and at
    least one backward does."""
    function = facts.function_of(call)
    held = _derived_in_scope(facts, call)

    def a_sum_with_other_terms(value: cst.BaseExpression) -> bool:
        terms = _additive_terms(value)
        return (len(terms) > 1 and any(set(names_within(term)) & held for term in terms)
                and any(not set(names_within(term)) & held for term in terms))

    found = False
    for backward in facts.training_calls:
        if not isinstance(backward.func, cst.Attribute) or backward.func.attr.value != "backward" \
                or facts.function_of(backward) is not function:
            continue
        receiver = backward.func.value
        if not set(names_within(receiver)) & held:
            continue
        name = dotted_name(receiver)
        values = ([value for value in facts.assigned_values.get(name, ()) if facts.function_of(value) is function]
                  if name is not None else [receiver])
        if not values or not all(a_sum_with_other_terms(value) for value in values):
            return False
        found = True
    return found


def _penalty_holders(facts: Facts, call: cst.Call) -> set[str]:
    """The names the callers of the call's function assign its result to, where that function
    returns what it computes from the gradient; empty otherwise."""
    function = facts.function_of(call)
    if function is None:
        return set()
    held = {name for assign in find_all(facts.statement_of(call), cst.Assign)
            for target in assign.targets for name in names_within(target.target)}
    for _ in range(3):
        held |= {name for name, values in facts.assigned_values.items() for value in values
                 if facts.function_of(value) is function and set(names_within(value)) & held}
    returned = [each.value for each in facts.own_statements(function, cst.Return) if each.value is not None]
    if not any(set(names_within(value)) & held or call in calls_within(value) for value in returned):
        return set()
    outside: set[str] = set()
    for caller in facts.calls_of(function):
        assign = facts.parents.get(caller)
        if not isinstance(assign, cst.Assign):
            return set()  # handed on unnamed: not followed
        outside.update(name for target in assign.targets for name in names_within(target.target))
    return outside


def _hand_back_the_module(facts: Facts, edits: Edits, model: Model) -> None:
    """Rule: `def fit(net, loader, device): net.to(device)`, wrapped there, and then `return
    net` (or `return net, history`): the caller handed in the module and gets the module
    back, as before, not a wrapper it never made (`regressor = fit(regressor, ...)` then
    `regressor.state_dict()` keeps the single-GPU keys, in another module ddpify does not
    migrate with this one's facts)."""
    if model.function is None or (model.function, model.name) not in facts.parameters_moved_here:
        return
    for returned in facts.own_statements(model.function, cst.Return):
        value = returned.value
        entries = [element.value for element in value.elements] if isinstance(value, cst.Tuple) else [value]
        for entry in entries:
            if isinstance(entry, cst.Name) and entry.value == model.name:
                edits.expressions[entry] = _unwrapped(model.name, edits)
                edits.report("DDP103", entry)


def _drop_moves_after_wrap(facts: Facts, edits: Edits, model: Model, wrap: cst.BaseStatement) -> None:
    """`model.eval().cpu()` to save a checkpoint, then `model.to(device).train()`: moving a
    DDP model replaces the parameters its gradient hooks watch, and gradients silently stop
    being synchronised. The model stays where it is (checkpoints load with map_location)."""
    for call in facts.device_moves.get(model.name, ()):
        if _before_wrap(facts, call, wrap) or _rebound_since_wrap(facts, call, model.name, wrap):
            continue
        if not model.name.startswith("self.") and facts.function_of(call) is not facts.function_of(wrap):
            continue
        receiver = cast(cst.Attribute, call.func).value  # a device move is a method call
        if dotted_name(_chain_base(receiver)) != model.name:
            # A loop variable over the models (`for m in (G, D): m.cpu()`): the loop moves the
            # others too, and is the user's to change.
            edits.report("DDP903", call, f"`{model.name}` is moved after its wrap (line {facts.line_of(wrap)}) by a "
                         f"loop over several models: DDP's gradient hooks stop seeing its parameters; "
                         f"move it before the wrap, or only after training")
            continue
        parent = facts.parents.get(call)
        if isinstance(receiver, (cst.Name, cst.Attribute)) and isinstance(parent, cst.Expr):
            edits.removed.add(facts.statement_of(call))  # `model.to(device)` alone
        elif isinstance(receiver, (cst.Name, cst.Attribute)) and isinstance(parent, cst.Assign):
            edits.removed.add(facts.statement_of(call))  # `model = model.cpu()`
        elif dotted_name(receiver) == model.name and isinstance(parent, cst.Attribute) \
                and parent.attr.value == "state_dict" and isinstance(facts.parents.get(parent), cst.Call):
            # `model.cpu().state_dict()`: the module's, a CPU copy where the move was to the CPU.
            edits.expressions[call] = _unwrapped(model.name, edits, _quote_for(facts, call))
            if _to_cpu(call):
                _copy_to_cpu(facts, edits, model.name, cast(cst.Call, facts.parents[parent]))
        else:
            edits.expressions[call] = lambda node: node.func.value
        edits.report("DDP106", call)
        if _to_cpu(call):
            _save_cpu_copies(facts, edits, model, call)


def _to_cpu(call: cst.Call) -> bool:
    """`.cpu()`, `.to("cpu")`, `.to(torch.device("cpu"))`."""
    method = cast(cst.Attribute, call.func).attr.value
    if method == "cpu":
        return True
    target = call.args[0].value if method == "to" and call.args else None
    if isinstance(target, cst.Call) and dotted_name(target.func) in ("torch.device", "device") and target.args:
        target = target.args[0].value
    return isinstance(target, cst.SimpleString) and target.evaluated_value == "cpu"


CPU_COPY = cst.parse_expression("{name: tensor.cpu() for name, tensor in STATE.items()}")


def _as_cpu_copy(state: cst.BaseExpression) -> cst.BaseExpression:
    comprehension = cast(cst.DictComp, CPU_COPY)
    items = cast(cst.Call, comprehension.for_in.iter)
    return comprehension.with_changes(for_in=comprehension.for_in.with_changes(
        iter=items.with_changes(func=cast(cst.Attribute, items.func).with_changes(value=state))))


def _copy_to_cpu(facts: Facts, edits: Edits, model: str, state_dict: cst.Call) -> None:
    """`model.state_dict()` in a save, as a CPU copy of the state dict (_as_cpu_copy): in place
    where its line stays within the line length, else computed on lines of its own before the
    save, under the same guard, as a reviewer would write it rather than one line of 120
    characters: `model_state = getattr(model, "module", model).state_dict()`, `model_cpu_state =
    {name: tensor.cpu() for name, tensor in model_state.items()}`, and the save takes
    `model_cpu_state`."""
    statement = facts.statement_of(state_dict)
    line = facts.module.code.splitlines()[facts.line_of(state_dict) - 1]
    # The copy around the state dict, and the unwrap of the model it may be taken through.
    grown = len(line) + len(facts.module.code_for_node(CPU_COPY)) - len("STATE") \
        + len(f'getattr({model}, "module", )')
    in_block = isinstance(facts.parents.get(statement), (cst.IndentedBlock, cst.Module))
    base = model.split(".")[-1]
    state, copy = facts.free_name(f"{base}_state"), facts.free_name(f"{base}_cpu_state")
    hoisted_here = [other for other in edits.hoisted if facts.statement_of(other) is statement]
    if grown <= LINE_LENGTH or not in_block or any(
            _model_of_state_dict(other) == model for other in hoisted_here):
        edits.expressions[state_dict] = _as_cpu_copy
        return

    def hoist(updated: cst.BaseExpression) -> tuple[list[Statement], cst.CSTNode]:
        return [edits.statement(f"{state} = {edits.code(updated)}\n"),
                edits.statement(f"{copy} = {edits.code(_as_cpu_copy(cst.Name(state)))}\n")], cst.Name(copy)

    edits.hoisted[state_dict] = hoist


def _model_of_state_dict(call: cst.CSTNode) -> Optional[str]:
    """`net` for `net.state_dict()` or `net.cpu().state_dict()`."""
    func = call.func if isinstance(call, cst.Call) else None
    return dotted_name(_chain_base(func.value)) if isinstance(func, cst.Attribute) else None


def _save_cpu_copies(facts: Facts, edits: Edits, model: Model, move: cst.Call) -> None:
    """The model stays on its device where the script moved it to the CPU to save it (and
    back after): the state dict it saves there is a CPU copy, as the checkpoint was (a
    file that loads without map_location on a machine without the GPU)."""
    start, function = facts.end_of(move), facts.function_of(move)
    later_moves = [facts.start_of(other) for other in facts.device_moves.get(model.name, ())
                   if facts.function_of(other) is function and facts.start_of(other) > start]
    until = min(later_moves, default=None)
    saves = set(facts.save_calls)
    for access in facts.attribute_reads.get(model.name, ()):
        call = facts.parents.get(access)
        if access.attr.value != "state_dict" or not isinstance(call, cst.Call) or call.func is not access \
                or facts.function_of(call) is not function or facts.start_of(call) < start \
                or (until is not None and facts.start_of(call) > until):
            continue
        node: Optional[cst.CSTNode] = call
        while node is not None and node not in saves and not isinstance(node, cst.BaseStatement):
            node = facts.parents.get(node)
        if node in saves:
            _copy_to_cpu(facts, edits, model.name, call)


UNWRAP_AFTER_TRAINING_CODE = '{model} = getattr({model}, "module", {model})  # training is over: the module itself\n'


def _unwrap_once_training_is_over(facts: Facts, edits: Edits, model: Model, wrap: cst.BaseStatement) -> None:
    """Rule: a device move of the wrapped model once nothing trains it any more, which the
    model is used after beyond its state dict (`model.cpu()` then a forward on CPU inputs, a
    whole-model pickle, `return model`; a move only for the checkpoint is dropped with a CPU
    copy saved, DDP106, so that the wrapped module is never moved after its wrap): the name
    is given back the module itself just before it
    (DDP103), and the user's move, save and later uses stay as written. The checkpoint is
    then the CPU state dict of the module, with the single-GPU keys, a whole-model pickle
    pickles the module, and a later forward on CPU inputs runs the module on the CPU, as in
    the original; moving the DDP wrapper instead would leave its buffer broadcasts on NCCL
    with CPU tensors, and dropping the move would leave the model on the GPU."""
    move = _move_after_training(facts, model.name, wrap)
    if move is None:
        return
    code = UNWRAP_AFTER_TRAINING_CODE.format(model=model.name)
    edits.insert_before(facts.statement_of(move), Insertion(edits.statements(code), takes_comments=True))
    edits.report("DDP103", move)


def _move_after_training(facts: Facts, name: str, wrap: cst.BaseStatement) -> Optional[cst.Call]:
    """The first device move of the wrapped model `name` (a plain name) in the wrap's own
    function, after the wrap, in a statement of the function's own body (so every later
    statement comes after it, on every path), outside any loop, with no training after it
    there: no backward or step, no call of a function that trains."""
    function = facts.function_of(wrap)
    if "." in name:
        return None
    body = function.body if function is not None else facts.module
    later_training = [*facts.training_calls, *facts.training_helper_calls] + [
        call for trainer in facts.training_functions for call in facts.calls_of(trainer)]
    for move in sorted(facts.device_moves.get(name, ()), key=facts.start_of):
        statement = facts.statement_of(move)
        if facts.function_of(move) is not function or facts.start_of(move) < facts.end_of(wrap) \
                or facts.parents.get(statement) is not body or facts.within_a_loop(move) \
                or _rebound_between(facts, name, wrap, move):
            continue
        if any(facts.function_of(call) is function and facts.start_of(call) > facts.start_of(move)
               for call in later_training):
            return None
        return move if _used_after(facts, name, move) else None
    return None


# What a use of the model may be for it still to be dropped with its move: its state dict
# read (a CPU copy then) or its mode set.
_STATE_ONLY = frozenset({"state_dict", "eval", "train", "cpu", "to", "cuda"})


def _used_after(facts: Facts, name: str, move: cst.Call) -> bool:
    """The moved model is used after the move beyond its state dict: a forward on CPU
    inputs, a whole-model pickle, handed on or returned. Only then does the move stay (on the
    module itself); a move only for the checkpoint is dropped, and the checkpoint is a CPU
    copy (DDP106), so the wrapped module is never moved after its wrap."""
    function, start = facts.function_of(move), facts.end_of(facts.statement_of(move))
    for node in facts.nodes_of(cst.Name):
        if node.value != name or facts.start_of(node) < start or facts.function_of(node) is not function:
            continue
        parent = facts.parents.get(node)
        if isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value in _STATE_ONLY:
            continue
        return True
    # The move inside the save (`torch.save(model.cpu().state_dict(), p)`) is only for it.
    return False


def _chain_base(value: cst.BaseExpression) -> cst.BaseExpression:
    """`model` for `model.eval()` (a call that returns the module itself)."""
    while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value in (
            "to", "cpu", "cuda", "train", "eval", "float", "double", "half", "bfloat16", "requires_grad_"):
        value = value.func.value
    return value


def _moved_elsewhere(facts: Facts, model: Model,
                     anchor: Optional[cst.BaseStatement]) -> Optional[tuple[Statement, str]]:
    """(the statement, the name it moves) where the model reaches its device, when that
    happens outside the function that builds its optimizer: the model is returned, passed
    on and stored (`self.model = model.to(gpu_id)` in a Trainer's __init__)."""
    if anchor is not None and _moves(anchor, model.name):
        return None
    # Where it trains first (a Trainer's __init__ or train()), not where it is only evaluated.
    training = {facts.function_of(call) for call in facts.training_calls}
    holders = sorted(facts.model_holders(model),
                     key=lambda held: (held[0] not in training and not held[1].startswith("self."),
                                       held[1]))
    callers = _callers_after_its_training(facts, model)
    for function, name in holders:
        if function is model.function and name == model.name and (
                anchor is not None or not _kept_on_self_elsewhere(facts, model)):
            continue  # (the trained attribute itself: only where nothing here moves it)
        if function in callers or _called_before_the_anchor(facts, model, function, anchor):
            # (What the caller does with the model it gets back comes after training; or the
            # function's move is one of those the wrap at the anchor already follows.)
            continue
        if _moved_in_place_by_a_helper(facts, function, name, training) or (
                _moves_what_it_is_handed(facts, function, name, training)
                and _handed_and_dropped(facts, model, function, name)):
            continue  # the caller's model moves at the call, and is wrapped there
        for statement in facts.statements_touching.get(name, ()):
            in_scope = name.startswith("self.") or facts.function_of(statement) is function
            if function is model.function and name == model.name and not _same_object(
                    facts, facts.function_of(statement), function):
                continue  # the trained attribute itself: only where the same object moves it
            # (Also in the same function, once stored on `self`: `self.model, self.optimizer =
            # model, optimizer`, then `self.model = self.model.cuda()` further down __init__.)
            later_on_self = name.startswith("self.") and anchor is not None \
                and facts.start_of(statement) > facts.start_of(anchor)
            the_model_itself = function is model.function and name == model.name
            if in_scope and (facts.function_of(statement) is not model.function or later_on_self) \
                    and _moves(statement, name) and (
                        the_model_itself or _moves_held_value(statement, _names_held_in(holders, function))):
                if later_on_self:
                    # `if args.cuda: self.model = self.model.cuda()`: after the branch, so that
                    # the model is wrapped on every path, on the device the branch chose.
                    lifted = facts.ancestor_in(statement, facts.block_of(cast(Statement, anchor)))
                    if isinstance(lifted, (cst.If, cst.With, cst.Try)):
                        return lifted, name
                if the_model_itself:
                    return _after_its_branch(facts, statement), name
                return statement, name
    return None


def _called_before_the_anchor(facts: Facts, model: Model, function: Optional[cst.FunctionDef],
                              anchor: Optional[cst.BaseStatement]) -> bool:
    """Rule (dominance, DESIGN §2.9): `if args.resume: model = load(model, path)` / `else:
    model.to(device)`, where `load`, a function of this file, moves what it is handed and
    returns it. Every call of `load` in the model's function ends before the anchor found
    there ends (the call sits inside the `if` the wrap follows, or before it): its move is one
    of the moves the wrap after the join follows on its path. A wrap inside `load` instead
    would run on that one path only, and the fresh model of the other branch would train
    unwrapped on every rank."""
    if anchor is None or function is None or function is model.function:
        return False
    calls = [call for call in facts.calls_of(function) if facts.function_of(call) is model.function]
    return bool(calls) and all(facts.end_of(call) <= facts.end_of(anchor) for call in calls)


def _callers_after_its_training(facts: Facts, model: Model) -> set[Optional[cst.FunctionDef]]:
    """Rule: `def train(loader): model = Net().to(device); ...; for epoch ...: <steps>; return
    model`, called as `model = train(loader)`: the function trains the model before it returns
    it, so whatever its callers do with the model they get back (`model.to(device)` again for a
    test, or `model = Net().to(device)` in a test-only branch) runs after the training and
    cannot be where the model reaches its device for it. The wrap stays in the function that
    trains (after its last move there), and every caller of that function is left out of the
    search for a move elsewhere. Empty when the model does not train in its own function (a
    Trainer it is handed to trains it, after the caller may still move it)."""
    if model.function is None or _training_start(facts, model) is None:
        return set()
    return {facts.function_of(call) for call in facts.calls_of(model.function)}


def _names_held_in(holders: Iterable[Holder], function: Optional[cst.FunctionDef]) -> set[str]:
    """The names that hold the model in `function`: its own, and the object's attributes."""
    return {name for where, name in holders if where is function or name.startswith("self.")}


def _moves_held_value(statement: cst.BaseStatement, held: set[str]) -> bool:
    """`self.model = model.to(gpu)`, `net.cuda()`, `self.net = DataParallel(net).cuda()`: the
    moved value reads a name that holds the model, so the move moves that model. `model =
    Net().to(device)` binds a new module to the name instead: another model, whose move says
    nothing about where the held one reaches its device (a caller building a fresh model for
    a test-only mode, after the trained one came back)."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    for small in statement.body:
        value = getattr(small, "value", None)
        while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
            if value.func.attr.value in ("to", "cuda") and held.intersection(names_within(value.func.value)):
                return True
            value = value.func.value
    return False


def _follow_the_move(facts: Facts, edits: Edits, setup: Plan,
                     model: Model) -> Optional[tuple[Optional[Statement], Model]]:
    """The wrap's anchor and the model it wraps: where the model reaches its device, followed
    to the holder that is moved elsewhere (_moved_elsewhere); None once reported."""
    built = _built_where_declared_global(facts, edits, model)
    if built is None:
        return None
    model = built
    anchor = _wrap_anchor(facts, model) if model.moved_in_call is None else model.optimizer_statement
    # (FSDP2 shards in place, where the model reaches its device: not hoisted.)
    hoisted = None if edits.options.fsdp2 else moved_each_call.move_made_by_callees(facts, model, anchor)
    if hoisted is not None:
        return anchor, Model(model.name, model.optimizer_statement, model.function, moved_by_callee=hoisted)
    later = _moved_by_a_later_method(facts, model, anchor)
    if later is not None:
        return later, Model(model.name, model.optimizer_statement, facts.function_of(later))
    moved = _moved_elsewhere(facts, model, anchor)
    if moved is None:
        return anchor, model
    if _reported_moved_before_the_setup(facts, edits, setup, model, moved):
        return None
    anchor, holder = moved
    return anchor, Model(holder, model.optimizer_statement, facts.function_of(anchor))


def _built_where_declared_global(facts: Facts, edits: Edits, model: Model) -> Optional[Model]:
    """Rule (DESIGN §2.9): `model = None` at module level is a placeholder, and `def
    build_model(): global model; model = Net().to(device)` builds the module's model: the
    wrap follows the build and move in that function, never the placeholder, where it would
    wrap None. The function runs once, or builds a new module on each call (a model per fold):
    each call then wraps its own new module, never a wrapper. The model as it was when the
    module level binds anything but None to the name. None, reported (DDP122), when no single
    function of the module's top declares it global and binds it that way."""
    if model.function is not None or "." in model.name or model.moved_in_call is not None:
        return model
    touching = facts.statements_touching.get(model.name, ())
    placeholders = [statement for statement in touching
                    if facts.function_of(statement) is None and model.name in assigned_names(statement)]
    if not placeholders or not all(_binds_none(statement, model.name) for statement in placeholders):
        return model
    builders = {function for statement in touching for function in [facts.function_of(statement)]
                if function is not None and model.name in assigned_names(statement)
                and _declares_global(function, model.name)}
    builder = next(iter(builders)) if len(builders) == 1 else None
    if builder is None or facts.function_of(builder) is not None or facts.class_of(builder) is not None \
            or not (_runs_once(facts, builder) or _built_afresh(builder, model.name)):
        names = ", ".join(sorted(f"`{function.name.value}()`" for function in builders))
        if len(builders) > 1:
            where = f"built by {names}, each under `global {model.name}`, so no one place builds it"
        elif builders:
            where = f"built by {names} under `global {model.name}`, which may run more than once"
        else:
            where = f"and no function here binds it under `global {model.name}`"
        edits.report("DDP122", placeholders[0], (
            f"`{model.name}` is a placeholder here, {where}: wrap it once by hand after it is built and "
            f"moved, `{model.name} = DDP({model.name}, device_ids=[local_rank])`"))
        return None
    return Model(model.name, model.optimizer_statement, builder)


def _built_afresh(function: cst.FunctionDef, name: str) -> bool:
    """The function's first statement that binds `name` builds a new value without reading it
    (`model = Net().to(device)`, not `model = model.to(device)`): each call makes a new module."""
    body = function.body.body if isinstance(function.body, cst.IndentedBlock) else ()
    first = next((statement for statement in body if name in assigned_names(statement)), None)
    if not isinstance(first, cst.SimpleStatementLine) or len(first.body) != 1 \
            or not isinstance(first.body[0], cst.Assign):
        return False
    return name not in names_within(first.body[0].value)


def _binds_none(statement: Statement, name: str) -> bool:
    """`name = None` (or `name: nn.Module = None`), the whole statement."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return False
    small = statement.body[0]
    if isinstance(small, cst.Assign):
        targets = [target.target for target in small.targets]
    elif isinstance(small, cst.AnnAssign):
        targets = [small.target]
    else:
        return False
    return small.value is not None and isinstance(small.value, cst.Name) and small.value.value == "None" and any(
        name in names_within(target) for target in targets)


def _declares_global(function: cst.FunctionDef, name: str) -> bool:
    return any(name in (item.name.value for item in declared.names if isinstance(item.name, cst.Name))
               for declared in find_all(function.body, cst.Global, into_functions=False))


def _moved_by_a_later_method(facts: Facts, model: Model, anchor: Optional[Statement]) -> Optional[Statement]:
    """Rule (dominance across the methods of one object, DESIGN §2.9): `self.G` is built
    with its optimizer in `build_model()`, which never moves it, and another method of the
    object moves it once `build_model()` has run (later_moves.moves_after_the_build: the
    method that calls it, after the call, `if self.use_cuda: self.G.cuda()` or a loop over
    the nets; or, for a model `__init__` built, the method that trains it, before its
    training loop). That move is where the model reaches its device: a wrap in
    `build_model()` would wrap a CPU module on every path, and the move after it would be
    dropped as a round trip of the wrapper. The wrap follows the last such move, after the
    statement of that method's body that holds it (the `if`, the loop), so that it comes
    after every move on every path. None when the model's own method moves it, or the moves
    are in several methods: the wrap stays where the model is built."""
    function = model.function
    if anchor is None or function is None or _moved_within(facts, model, function):
        return None
    found: list[Statement] = []
    for call in later_moves.moves_after_the_build(facts, model):
        method = cast(cst.FunctionDef, facts.function_of(call))
        lifted = facts.ancestor_in(call, method.body)
        if lifted is not None and not _to_cpu(call):
            found.append(cast(Statement, lifted))
    if len({facts.function_of(statement) for statement in found}) != 1:
        return None
    return max(found, key=facts.start_of)


def _moved_within(facts: Facts, model: Model, function: cst.FunctionDef) -> bool:
    """The model's own function moves it: `self.G.to(device)`, `self.G = G().cuda()`, or a
    call of a method that does."""
    return any(facts.function_of(call) is function for call in facts.device_moves.get(model.name, ())) or any(
        facts.function_of(statement) is function and _moves(statement, model.name)
        for statement in facts.statements_touching.get(model.name, ())) or bool(_calls_of_methods_moving(facts, model))


def _reported_moved_before_the_setup(facts: Facts, edits: Edits, setup: Plan, model: Model,
                                     moved: tuple[Statement, str]) -> bool:
    """Rule: `self.model` moved in another method of its object (the base class's __init__)
    that runs before the distributed setup (placed later, where the device is chosen): a wrap
    there would find no process group and the model would train alone on every rank (DDP903)."""
    statement, name = moved
    if name != model.name or facts.function_of(statement) is model.function \
            or _setup_runs_before(facts, setup, statement):
        return False
    edits.report("DDP903", statement, (
        f"`{model.name}` reaches its device here, before the distributed setup runs (it goes "
        f"where the device is chosen, later): choose the device in this method, before the "
        f"move (`self.device = torch.device(...)`), or wrap `{model.name}` in DDP by hand"))
    return True


def _setup_runs_before(facts: Facts, setup: Plan, anchor: Statement) -> bool:
    """The distributed setup has run when `anchor` runs: it sits in the same function, in a
    function that only the setup's function calls, after the device choice, or in a method
    of the object that the anchor's function calls before it (`self.device =
    self._acquire_device()`, then the move)."""
    if setup.sees_setup(facts, anchor):
        return True
    function = facts.function_of(anchor)
    if setup.function is None or function is None:
        return False
    calls = facts.calls_of(function)
    if setup.anchor is not None and calls and all(
            facts.function_of(call) is setup.function and facts.start_of(call) > facts.end_of(setup.anchor)
            for call in calls):
        # `train(model, loader, device)`, called only from the setup's function, after the
        # device choice the setup follows: its `model.to(device)` runs in the group.
        return True
    return any(facts.function_of(call) is function and facts.start_of(call) < facts.start_of(anchor)
               and dotted_name(call.func) == f"self.{setup.function.name.value}"
               for call in facts.calls_of(setup.function))


def _after_its_branch(facts: Facts, statement: Statement) -> Statement:
    """`if cuda: self.model = self.model.cuda()` in the base class's __init__: the
    statement of that method's body that holds the move, so that the wrap comes after the
    branch and the model is wrapped on every path."""
    function = facts.function_of(statement)
    if function is None or not isinstance(function.body, cst.IndentedBlock):
        return statement
    lifted = facts.ancestor_in(statement, function.body)
    return lifted if isinstance(lifted, (cst.If, cst.With, cst.Try)) else statement


def _kept_on_self_elsewhere(facts: Facts, model: Model) -> bool:
    """Rule: `self.model` trained in `Exp_Main.train()` and moved in `Exp_Basic.__init__`
    (`self.model = self._build_model().to(self.device)`, the model built by a subclass's
    override): the move of the attribute in another method of the same object is where it
    reaches its device, and the wrap follows it there."""
    return model.name.startswith("self.") and model.function is not None and facts.class_of(model.function) is not None


def _same_object(facts: Facts, one: Optional[cst.FunctionDef], other: Optional[cst.FunctionDef]) -> bool:
    """Both are methods of one class, or of a class and a base class of it defined in this
    file (their `self` may be the same object); `self.x` of unrelated classes is not."""
    first, second = facts.class_of(one), facts.class_of(other)
    if first is None or second is None:
        return False
    return first is second or _derives_in_file(facts, first, second) or _derives_in_file(facts, second, first)


def _derives_in_file(facts: Facts, derived: cst.ClassDef, base: cst.ClassDef) -> bool:
    """`derived` inherits from `base`, directly or through other classes of this file."""
    seen: set[str] = set()
    pending = [derived]
    while pending:
        current = pending.pop()
        for argument in current.bases:
            named = dotted_name(argument.value)
            last = named.rsplit(".", 1)[-1] if named else None
            if last is None or last in seen:
                continue
            seen.add(last)
            if last == base.name.value:
                return True
            found = facts.classes.get(last)
            if isinstance(found, cst.ClassDef):
                pending.append(found)
    return False


def _moved_in_place_by_a_helper(facts: Facts, function: Optional[cst.FunctionDef], name: str,
                                training: set[Optional[cst.FunctionDef]]) -> bool:
    """Rule: `def prepare(net): net.apply(init); net.to(device)`, called as `prepare(model)`:
    the parameter is moved in place and then dropped (neither returned, kept on `self` nor
    trained there). A wrap of it would rebind the helper's local name only, and the caller's
    model would train unwrapped on every rank; the wrap goes after the call instead."""
    return function is not None and function not in training and not name.startswith("self.") \
        and name in parameter_names(function) and not facts.returned_to_sites(name, function) \
        and not facts.stored_in_self(name, function) and not any(
            returned.value is not None and name in names_within(returned.value)
            for returned in facts.own_statements(function, cst.Return))


def _result_dropped(facts: Facts, call: cst.Call) -> bool:
    """`to_device(model, device)` as a statement of its own: what the call returns is dropped."""
    return isinstance(facts.parents.get(call), cst.Expr)


def _handed_and_dropped(facts: Facts, model: Model, function: Optional[cst.FunctionDef], name: str) -> bool:
    """The model is handed to `function` as its parameter `name` by a call whose result is
    dropped: a wrap there would rebind the helper's local name only."""
    return any(callee is function and parameter == name and _result_dropped(facts, call)
               for callee, parameter, call in facts._calls_passing(model.name, model.function))


def _moves_what_it_is_handed(facts: Facts, function: Optional[cst.FunctionDef], name: str,
                             training: set[Optional[cst.FunctionDef]]) -> bool:
    """Rule: `def to_device(m, d): return m.to(d)` called as a statement, `to_device(model,
    device)`: `nn.Module.to` moves the module in place, so the caller's model is on its device
    after the call even though the helper's result is dropped, and the wrap follows the call
    (before: the wrap came right after the build, DDP wrapped a CPU module, exit 0)."""
    return function is not None and function not in training and not name.startswith("self.") \
        and name in parameter_names(function) and not facts.stored_in_self(name, function)


def _moves(statement: cst.BaseStatement, name: str) -> bool:
    """`name.to(...)`, `name = x.to(...)` or `name = x.cuda()`: the statement moves a model."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    for small in statement.body:
        value = getattr(small, "value", None)
        while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
            if value.func.attr.value in ("to", "cuda"):
                return True
            value = value.func.value
    return False


def _unused_submodules(facts: Facts, model: Model, anchor: cst.BaseStatement) -> list[cst.Assign]:
    """Submodules that forward() never uses, in the classes the model is built from."""
    unused: list[cst.Assign] = []
    for statement in facts.statements_touching.get(model.name, ()):
        if facts.line_of(statement) > facts.line_of(anchor):
            continue
        code = facts.module.code_for_node(statement)
        for class_name, assigns in facts.unused_submodules.items():
            if f"{class_name}(" in code:
                unused.extend(assigns)
    return unused


def _report_parts_run_on_some_calls(facts: Facts, edits: Edits, model: Model, anchor: cst.BaseStatement) -> bool:
    """`def forward(self, x, with_aux=False): ... if with_aux: return out, self.aux_head(h)`
    and a training loop that asks for the auxiliary output every k steps, or a part run on a
    random draw: on the steps without it, the part's parameters get no gradient, and DDP,
    waiting for every gradient, fails at the next step. Rule: a submodule of the model's
    class that forward runs only under a test on one of its parameters, on a random draw, or
    only in evaluation (`if not self.training: return self.calibrate(logits)`)
    (analysis.conditional_parts) makes the wrap expect unused parameters (DDP105), unless
    every call of the model in a training loop passes that parameter a literal (or leaves
    its default) under which the part runs. True when one was found."""
    for statement in facts.statements_touching.get(model.name, ()):
        if facts.line_of(statement) > facts.line_of(anchor):
            continue
        code = facts.module.code_for_node(statement)
        for class_name in [name for name in facts.classes if f"{name}(" in code]:
            for part, forward, nested in _conditional_parts_within(facts, class_name):
                if nested and part.parameter not in (None, TRAINING_MODE):
                    if _handed_so_it_runs(facts, model, class_name, forward, part):
                        continue
                elif part.parameter is not None and _runs_on_every_training_call(facts, model, forward, part):
                    continue
                why = (f"`{part.parameter}` decides" if part.parameter is not None
                       else "a random draw decides")
                edits.report("DDP105", part.test, "submodule unused in forward: DDP told to expect unused "
                             f"parameters: {why} what forward runs of `self.{part.attribute}`, and on the steps "
                             "it leaves a part out, that part's parameters get no gradient")
                return True
    return False


def _conditional_parts_within(facts: Facts, class_name: str) -> list[tuple[ConditionalPart, cst.FunctionDef, bool]]:
    """The conditional parts of a class of this file and of the classes of this file its
    `__init__` builds (`Block(dim, p_drop)` layers of a layer-drop), at any depth; each with
    its forward and whether it belongs to an inner class."""
    found: list[tuple[ConditionalPart, cst.FunctionDef, bool]] = []
    seen: set[str] = set()
    pending = [class_name]
    while pending:
        name = pending.pop(0)
        if name in seen:
            continue
        seen.add(name)
        forward, parts = facts.conditional_submodules.get(name, (None, []))
        found += [(part, forward, name != class_name) for part in parts if forward is not None]
        init = facts.class_inits.get(name)
        if init is not None:
            pending += [call.func.value for call in find_all(init.body, cst.Call)
                        if isinstance(call.func, cst.Name) and call.func.value in facts.classes]
    return found


def _runs_on_every_training_call(facts: Facts, model: Model, forward: cst.FunctionDef, part: ConditionalPart) -> bool:
    """Every call of the model in a training loop gives `part.parameter` a literal (or
    leaves its default) under which `part.test` lets the part run. Tests read: `p`, `not p`,
    `p is None`, `p is not None`; `self.training` is True in training."""
    parameter = part.parameter
    if parameter == TRAINING_MODE:  # a training loop runs the model in training mode
        return _literal_test(part.test, parameter, cst.Name("True")) == part.runs_when
    return parameter is not None and _model_calls_give(facts, model, forward, parameter, part)


def _handed_so_it_runs(facts: Facts, model: Model, class_name: str, forward: cst.FunctionDef,
                       part: ConditionalPart) -> bool:
    """Rule: a part of an inner class that its forward runs under a test on one of its own
    parameters (`Block.forward(x, mask=None)`: `if mask is not None: self.gate(mask)`) runs
    on every training call only when every call of that class's instances in the outer
    classes' methods (`self.block(h, mask)`, `for block in self.blocks: h = block(h, mask)`)
    hands it a literal (or leaves its default) under which the test lets it run, or hands
    it a parameter of the model's forward that every call of the model in a training loop
    gives such a literal. Any other value, or a call not found, leaves the part conditional."""
    inner = facts.class_of(forward)
    parameter = cast(str, part.parameter)
    if inner is None:
        return False
    calls = _calls_of_inner_instances(facts, inner)
    if not calls:
        return False
    defaults = {param.name.value: param.default for param in [*forward.params.params, *forward.params.kwonly_params]}
    positional = positional_parameters(forward)[1:]
    outer = facts.classes.get(class_name)
    for call, method in calls:
        if any(arg.star for arg in call.args):
            return False
        value = argument_among(call, parameter, positional) or defaults.get(parameter)
        if value is None:
            return False
        handed = dotted_name(value)
        if handed is None or handed in ("None", "True", "False"):
            if _literal_test(part.test, parameter, value) != part.runs_when:
                return False
            continue
        if handed is None or method.name.value != "forward" or facts.class_of(method) is not outer \
                or handed not in parameter_names(method):
            return False
        if not _model_calls_give(facts, model, method, handed, part):
            return False
    return True


def _calls_of_inner_instances(facts: Facts, inner: cst.ClassDef) -> list[tuple[cst.Call, cst.FunctionDef]]:
    """Calls of the instances of `inner` that other classes of this file keep (`self.block =
    Block(...)`, `self.blocks = nn.ModuleList([Block(...) for ...])`) in their methods: of
    `self.block(...)`, and of the loop variable of `for block in self.blocks:`."""
    found: list[tuple[cst.Call, cst.FunctionDef]] = []
    for name, outer in facts.classes.items():
        init = facts.class_inits.get(name)
        if outer is inner or init is None:
            continue
        holders = {f"self.{attribute}" for attribute, assign in self_attributes(init) if assign is not None and any(
            dotted_name(call.func) == inner.name.value for call in find_all(assign.value, cst.Call))}
        if not holders:
            continue
        for method in outer.body.body:
            if not isinstance(method, cst.FunctionDef) or method is init:
                continue
            names = set(holders) | {loop.target.value for loop in find_all(method.body, cst.For)
                                    if isinstance(loop.target, cst.Name) and dotted_name(loop.iter) in holders}
            found += [(call, method) for call in find_all(method.body, cst.Call) if dotted_name(call.func) in names]
    return found


def _model_calls_give(facts: Facts, model: Model, forward: cst.FunctionDef, parameter: str,
                      part: ConditionalPart) -> bool:
    """Every call of the model in a training loop gives the model's forward `parameter` (or
    leaves its default) a literal under which the inner part's test lets it run."""
    calls = [call for call in facts.calls_by_callee.get(model.name, ()) if facts.training_loop_around(call)]
    if not calls:
        return False
    defaults = {param.name.value: param.default for param in [*forward.params.params, *forward.params.kwonly_params]}
    positional = positional_parameters(forward)[1:]
    for call in calls:
        value = argument_among(call, parameter, positional) or defaults.get(parameter)
        if any(arg.star == "**" for arg in call.args) or value is None:
            return False
        if _literal_test(part.test, cast(str, part.parameter), value) != part.runs_when:
            return False
    return True


def _literal_test(test: cst.BaseExpression, parameter: str, value: cst.BaseExpression) -> Optional[bool]:
    """The outcome of `test` with `parameter` bound to the literal `value`; None where
    either is not one of the plain shapes."""
    if (isinstance(test, cst.Comparison) and dotted_name(test.left) == parameter and len(test.comparisons) == 1
            and isinstance(test.comparisons[0].operator, (cst.Is, cst.IsNot))
            and dotted_name(test.comparisons[0].comparator) == "None"):
        # A value other than the literal None is taken for a value: a name the loop sets to
        # None on some steps is _report_arguments_none_on_some_steps's case, read first.
        is_none = dotted_name(value) == "None"
        return is_none if isinstance(test.comparisons[0].operator, cst.Is) else not is_none
    truth: Optional[bool] = True if is_true(value) else False if is_false(value) else None
    if truth is None:
        return None
    if dotted_name(test) == parameter:
        return truth
    if (isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not)
            and dotted_name(test.expression) == parameter):
        return not truth
    return None


def _report_arguments_none_on_some_steps(facts: Facts, edits: Edits, model: Model) -> bool:
    """`if random.random() < p_uncond: labels = None` ... `model(x, t, labels)` in a training
    loop (classifier-free guidance's dropped labels, an optional mask): on those steps the
    parameters the argument feeds get no gradient, which DDP, waiting for every gradient,
    fails on at the next step; and where the step is drawn at random, the ranks differ.
    Rule: a call of the model inside a training loop that passes a name the same loop sets
    to None (`x = None`, `x = a if test else None`) makes the wrap expect unused parameters
    (DDP105). True when one was found."""
    found = False
    for call in facts.calls_by_callee.get(model.name, ()):
        loop = facts.training_loop_around(call)
        if loop is None:
            continue
        for arg in call.args:
            if not arg.star and isinstance(arg.value, cst.Name) and _set_to_none_in(loop, arg.value.value):
                edits.report("DDP105", call, "submodule unused in forward: DDP told to expect unused "
                             f"parameters: `{arg.value.value}` is None on some training steps, and what it "
                             "feeds in the forward then gets no gradient")
                found = True
                break
    return found


def _set_to_none_in(loop: cst.For, name: str) -> bool:
    for assign in find_all(loop.body, cst.Assign):
        if len(assign.targets) != 1 or dotted_name(assign.targets[0].target) != name:
            continue
        value = assign.value
        branches = [value.body, value.orelse] if isinstance(value, cst.IfExp) else [value]
        if any(isinstance(branch, cst.Name) and branch.value == "None" for branch in branches):
            return True
    return False


def _gradless_parts_elsewhere(facts: Facts, model: Model, anchor: cst.BaseStatement) -> list[str]:
    """`encoder = EncoderCNN(embed).to(device)`, where EncoderCNN, in another module of the
    project, runs its `self.resnet` only under torch.no_grad(): `EncoderCNN.resnet`."""
    found: list[str] = []
    for statement in facts.statements_touching.get(model.name, ()):
        if facts.line_of(statement) > facts.line_of(anchor):
            continue
        code = facts.module.code_for_node(statement)
        for called, parts in facts.gradless_project_classes.items():
            if f"{called}(" in code:
                found.extend(f"`{called.rsplit('.', 1)[-1]}.{part}`" for part in parts)
    return list(dict.fromkeys(found))


def _wrap_code(facts: Facts, anchor: cst.BaseStatement, model: str, device_type: str,
               sync_batchnorm: bool, extra: str) -> str:
    if sync_batchnorm:
        return SYNC_BATCHNORM_CODE.format(model=model, device_type=device_type, extra=extra)
    code = WRAP_CODE.format(model=model, device_type=device_type, extra=extra)
    indent = facts.positions[anchor].start.column + 4
    if not fits(indent - 4, max(code.splitlines(), key=len)):
        code = WRAP_CODE_SPLIT.format(model=model, device_type=device_type, extra=extra)
    if not fits(facts.positions[anchor].start.column, max(code.splitlines(), key=len)):
        exploded_extra = "".join(f"\n        {arg.strip()}," for arg in extra.split(",") if arg.strip())
        code = WRAP_CODE_EXPLODED.format(model=model, device_type=device_type, extra=exploded_extra)
    return code


def _wrap_anchor(facts: Facts, model: Model) -> Optional[Statement]:
    """The statement the wrap follows: the last that builds, loads, moves or otherwise works
    on the model before it first trains, in the innermost block that holds all of them and
    the training.

    DDP must see the model on its final device, with its final weights, on every path: a
    model built fresh in one branch and loaded from a checkpoint in the other, then moved
    after the if, is wrapped once, after the move; a `net.cuda()` or `net.apply(init)` a
    hundred lines after the optimizer still comes before the wrap (DDP broadcasts rank 0's
    weights once, when it wraps). A `model = torch.compile(model)` comes after the wrap:
    compiling the DDP module lets the compiler split graphs at DDP's gradient buckets; but
    not for a model whose state dict the script saves or loads, whose keys must stay the
    compiled module's (`_orig_mod.*`, as the single-process script writes them). None
    when a move sits inside the training itself: no place before it sees the model on its
    device.
    """
    function = model.function
    training = _training_start(facts, model)
    compiles = facts.compile_statements.get(model.name, ())
    if compiles and _state_dict_read(facts, model):
        # Its checkpoint holds the compiled module's keys (`_orig_mod.*`): wrapped after the
        # compile, the wrapper's `.module` is that compiled module, under torchrun and plain
        # python alike, and the saved keys are the single-process script's.
        compiles = ()
    reaching: list[Statement] = []
    # A move inside another statement (`m = model.to(device)`) touches the model too.
    moving = [facts.statement_of(call) for call in facts.device_moves.get(model.name, ())]
    # `model, criterion = set_model()`: unpacked from what a helper returns, moved there.
    unpacked = [facts.statement_of(assign) for assign in facts.own_statements(function, cst.Assign)
        if any(isinstance(target.target, cst.Tuple) and model.name in names_within(target.target)
               for target in assign.targets)]
    # `ema = copy.deepcopy(model)`, `AveragedModel(model)`: a copy of the raw module, not of DDP.
    derived = [facts.statement_of(call) for call in _derivations(facts, model.name)]
    # `net = modules["net"]` and `for m in modules.values(): m.to(device)`, in either order.
    moving += [facts.statement_of(call) for call in container_moves(facts, model)]
    # `prepare(model)` whose body moves its parameter in place (_moved_in_place_by_a_helper).
    trains_in = {facts.function_of(call) for call in facts.training_calls}
    moving += [facts.statement_of(call) for callee, parameter, call in facts._calls_passing(model.name, function)
               if facts.device_moves.get(parameter) and any(facts.function_of(move) is callee
                                                            for move in facts.device_moves[parameter])
               and (_moved_in_place_by_a_helper(facts, callee, parameter, trains_in)
                    or _result_dropped(facts, call) and _moves_what_it_is_handed(facts, callee, parameter, trains_in))]
    moving += _calls_of_methods_moving(facts, model)
    moving += _calls_of_functions_moving(facts, model)
    # `if args.resume: self.load(path)` / `else: self.model = Net().to(device)`: another path.
    moving += _calls_of_methods_binding(facts, model)
    # `model.encoder.to(device)`, or `head.to(device)` after `model = nn.Sequential(backbone,
    # head)`: a part of the model reaches its device, and the model with it.
    moving += [facts.statement_of(call) for part in _parts_of(facts, model)
               for call in facts.device_moves.get(part, ())
               if facts.function_of(call) is function and not _to_cpu(call)]
    if _moved_first_in_training(facts, model, training, moving) is not None:
        return None
    # `freeze(model.backbone)` before the training: DDP registers the parameters that require
    # grad when it wraps, so the wrap comes after the change (else DDP111).
    moving += [facts.statement_of(call) for call, handed in _calls_changing_requires_grad(facts, model)
               if facts.function_of(call) is function and any(
                   freezing.part_of(value, model.name) or dotted_name(value) == model.name for value, _ in handed)]
    for statement in [*facts.statements_touching.get(model.name, ()), *moving, *unpacked, *derived]:
        if statement in compiles or statement in reaching or facts.function_of(statement) is not function:
            continue
        if statement in derived and statement not in moving:
            continue  # the copy is made after the wrap, of its module: rank 0's broadcast weights
        if training is not None and facts.end_of(statement) > facts.start_of(training):
            continue  # the training itself, or after it
        if training is None and facts.start_of(statement) > facts.start_of(model.optimizer_statement) and not (
                statement in moving or _moves(statement, model.name) or _assigns(statement, model.name)):
            continue  # trained where this file cannot see: only what builds or moves it counts
        reaching.append(statement)
    while reaching:
        block = innermost_common_block(facts, [*reaching, *([training] if training is not None else [])])
        anchors = [facts.ancestor_in(statement, block) for statement in reaching]
        anchor = max((a for a in anchors if a is not None), key=facts.start_of)
        if training is None or facts.ancestor_in(training, block) is not anchor:
            return cast(Statement, anchor)
        reaching = _reaching_inside(facts, anchor, reaching, training)
    return None


def _state_dict_read(facts: Facts, model: Model) -> bool:
    """The script saves or loads the model's weights (`model.state_dict()`,
    `model.load_state_dict(...)`) in the model's function."""
    return any(read.attr.value in ("state_dict", "load_state_dict") and facts.function_of(read) is model.function
               for read in facts.attribute_reads.get(model.name, ()))


def _parts_of(facts: Facts, model: Model) -> list[str]:
    """The names of the model's parts: its attributes (`model.encoder`), and the modules it
    is built from in its function (`backbone`, `head` of `model = nn.Sequential(backbone,
    head)`, `nn.ModuleList([encoder, decoder])`). A move of one moves the model's parameters."""
    parts = [name for name in facts.device_moves if name.startswith(f"{model.name}.")]
    for statement in facts.statements_touching.get(model.name, ()):
        if facts.function_of(statement) is not model.function or not _assigns(statement, model.name) \
                or not isinstance(statement, cst.SimpleStatementLine):
            continue
        value = getattr(statement.body[0], "value", None)
        if not isinstance(value, cst.Call):
            continue
        handed = [arg.value for arg in value.args]
        handed += [element.value for arg in handed if isinstance(arg, (cst.List, cst.Tuple))
                   for element in arg.elements]
        parts += [arg.value for arg in handed if isinstance(arg, cst.Name) and arg.value != model.name]
    return parts


def _moved_first_in_training(facts: Facts, model: Model, training: Optional[cst.CSTNode],
                             moving: list[Statement]) -> Optional[cst.Call]:
    """Rule: `for epoch in ...: model.to(device).train()` (or `model.cuda()` at the top of
    the epoch), and nothing moves the model before the training: it reaches its device only
    inside the training, so no place before the training sees it there. A wrap before the
    loop would wrap a CPU module (DDP with device_ids refuses it on a GPU; without, the
    gradients sync on the CPU while the inputs go to the GPU), and the move after it would be
    dropped as a round trip of the wrapped model (DDP106). No wrap: DDP903. (The move in
    the training, or None.)"""
    if training is None:
        return None
    start, end = facts.start_of(training), facts.end_of(training)
    inside = [call for call in facts.device_moves.get(model.name, ())
              if facts.function_of(call) is model.function and not _to_cpu(call)
              and start <= facts.start_of(call) and facts.end_of(call) <= end]
    if not inside or any(
            facts.function_of(statement) is model.function and facts.end_of(statement) <= start
            and (statement in moving or _moves(statement, model.name))
            for statement in [*facts.statements_touching.get(model.name, ()), *moving]):
        return None
    return min(inside, key=facts.start_of)


def _calls_of_methods_moving(facts: Facts, model: Model) -> list[Statement]:
    """Rule: `self.net = Net()` then `self.enable_gpu(flag)` in __init__, whose body moves
    `self.net` (`self.net.cuda()` under a flag): a method of the same class called where the
    model is built moves it in place. That call is a move of the model, so the wrap follows
    it, and the move in the method, before the wrap, stays as written."""
    function = model.function
    if function is None or not model.name.startswith("self.") or facts.class_of(function) is None:
        return []
    methods = {facts.function_of(call) for call in facts.device_moves.get(model.name, ())}
    return [facts.statement_of(call) for method in methods
            if method is not None and method is not function and facts.class_of(method) is facts.class_of(function)
            for call in facts.calls_of(method) if facts.function_of(call) is function]


def _calls_of_methods_binding(facts: Facts, model: Model) -> list[Statement]:
    """Rule (every construction path is wrapped, DESIGN §2.9): `if args.resume:
    self.load(args.resume)` / `else: self.model = Net().to(self.device)`, where the method
    `load` of the same class binds `self.model` anew (`self.model = torch.load(path, ...)`):
    the call is a construction path of the model, as the assignment in the other branch is.
    Counted among the statements that reach the model, it lifts the wrap after the merge
    point of the branches, so the resumed model is wrapped too (before: the wrap sat in the
    fresh branch alone and the resumed model trained unsynchronised, exit 0)."""
    function = model.function
    if function is None or not model.name.startswith("self.") or facts.class_of(function) is None:
        return []
    binders = {facts.function_of(statement) for statement in facts.statements_touching.get(model.name, ())
               if _assigns(statement, model.name)}
    return [facts.statement_of(call) for method in binders
            if method is not None and method is not function and _same_object(facts, method, function)
            for call in facts.calls_of(method) if facts.function_of(call) is function]


def _calls_of_functions_moving(facts: Facts, model: Model) -> list[Statement]:
    """Rule: `def place(): model.to(device)` (or `global model; model = model.to(device)`), a
    function of this file that moves the model it reads from an enclosing scope, called as
    `place()` where the model is built: the call moves the model, so the wrap follows it (as
    a method moving `self.net` does, _calls_of_methods_moving). Not a function with a
    parameter or a local of that name (another object)."""
    if "." in model.name:
        return []
    movers = {facts.function_of(call) for call in facts.device_moves.get(model.name, ())}
    return [facts.statement_of(call) for mover in movers
            if mover is not None and mover is not model.function and _reads_outer(facts, mover, model)
            for call in facts.calls_by_callee.get(mover.name.value, ())
            if facts.function_of(call) is model.function]


def _reads_outer(facts: Facts, function: cst.FunctionDef, model: Model) -> bool:
    """`function` reads the model's own variable: it binds no parameter or local of that name,
    and sits in the model's function (a closure) or the model is module level (a global)."""
    if model.name in parameter_names(function) or model.name in names_bound_in(function):
        return False
    return model.function is None or model.function in ancestors_up_to(facts.parents, function, None)


def _reaching_inside(facts: Facts, compound: cst.CSTNode, reaching: list[Statement],
                     training: cst.CSTNode) -> list[Statement]:
    """`net = Net()` at module level, then `net = net.to(device)` and the training inside
    `if __name__ == "__main__":` (or a `with` or `try` body): the last statement that reaches
    the model and the training share a compound statement. The wrap goes inside it, after the
    statements in its body that reach the model (the statements before it, the build, come
    first on every path into the body): those are returned, to look for the anchor among
    them. Empty, so no wrap is placed, when the compound is a loop or such a statement sits in
    a loop inside it (a fold loop that moves the model built before it: a wrap there would
    wrap the wrapper on the next pass), or the training or every such statement is outside
    its body (an `else` branch, a handler)."""
    if not isinstance(compound, (cst.If, cst.With, cst.Try)):
        return []
    if facts.ancestor_in(training, compound.body) is None:
        return []
    inside = [statement for statement in reaching if facts.ancestor_in(statement, compound.body) is not None]
    if any(later_moves.in_loop_below(facts, statement, compound) for statement in inside):
        return []
    return inside


# ModelEMA, ModelEmaV2, EMA, create_ema, ema_model: not "schema" or "remat".
_EMA_NAME = re.compile(r"EMA|Ema|(^|_)ema(_|$)")


def _derivations(facts: Facts, name: str) -> list[cst.Call]:
    """Calls that derive another model from the model's value: `copy.deepcopy(model)`,
    `AveragedModel(model, ...)`, `ModelEMA(model)`. The wrap goes after those that come
    before the training; one that comes after it (a best-epoch snapshot) reads the raw module
    through `getattr(model, "module", model)`. Either way the copy is the single-GPU module,
    whose checkpoint keys have no "module." prefix. (An EMA class is known by its name, or,
    defined in this file, by an `__init__` or body that deep-copies what it is handed first:
    `WeightAverager(model)` whose `__init__` keeps `copy.deepcopy(model)`.)"""
    found: list[cst.Call] = []
    for qualified, calls in facts.calls_named.items():
        last = qualified.rsplit(".", 1)[-1]
        if qualified == "copy.deepcopy" or last == "AveragedModel" or _EMA_NAME.search(last) or (
                _copies_what_it_is_handed(facts, last)):
            found.extend(call for call in calls if call.args and call.args[0].keyword is None
                         and not call.args[0].star and dotted_name(call.args[0].value) == name)
    return found


def _trains_what_it_is_handed(facts: Facts, name: str, function: cst.FunctionDef) -> bool:
    """`def fit(network, ...)` that trains `network` and keeps `copy.deepcopy(network)` of the
    best epoch, or a Trainer class whose `__init__` keeps an EMA copy and whose methods train:
    not a copier. It is handed the wrapper, which its training steps need (handed the raw
    module, no rank would synchronise its gradients); the copy inside is unwrapped there."""
    if name not in facts.classes:
        return function in facts.training_functions
    owner = facts.class_of(function)
    return owner is not None and any(isinstance(method, cst.FunctionDef) and method in facts.training_functions
                                     for method in owner.body.body)


def _copier_handed_the_model(facts: Facts, call: cst.Call, holders: set[Holder]) -> bool:
    """`EMA(student)` where the class `EMA` of this file deep-copies its parameter, and the
    model's value reaches that parameter: the copy inside it is unwrapped there, once."""
    callee = dotted_name(call.func) or ""
    function = facts.class_inits.get(callee) if callee in facts.classes else facts.functions.get(callee)
    return function is not None and any(held_in is function for held_in, _ in holders)


def _copies_what_it_is_handed(facts: Facts, name: str) -> bool:
    """A class of this file whose `__init__`, or a function of this file whose body, hands its
    first parameter to `copy.deepcopy`."""
    function = facts.class_inits.get(name) if name in facts.classes else facts.functions.get(name)
    if function is None or _trains_what_it_is_handed(facts, name, function):
        return False
    parameters = positional_parameters(function)[1 if name in facts.classes else 0:]
    if not parameters:
        return False
    return any(facts.function_of(call) is function and call.args and call.args[0].keyword is None
               and dotted_name(call.args[0].value) == parameters[0]
               for call in facts.calls_named.get("copy.deepcopy", ()))


def _training_start(facts: Facts, model: Model) -> Optional[cst.CSTNode]:
    """Where the model starts to train in its function: the first training call, or the
    outermost loop around it (an epoch loop, a `while step < max_steps`) that does not
    build the model anew (a k-fold loop that builds one model per fold does)."""
    built = [statement for statement in facts.statements_touching.get(model.name, ())
             if facts.function_of(statement) is model.function and _assigns(statement, model.name)]
    # The rule is per model, not one model per function: training before the model is first
    # built (a teacher trained before its student is made) trains another model.
    call = facts.first_training_call_in(model.function, min(built, key=facts.start_of, default=None))
    if call is None:
        return None
    start: cst.CSTNode = call
    child: cst.CSTNode = call
    parent = facts.parents.get(call)
    while parent is not None and not isinstance(parent, cst.FunctionDef):
        if isinstance(parent, (cst.For, cst.While)) and child is parent.body:
            if any(facts.ancestor_in(statement, parent.body) is not None for statement in built):
                break
            start = parent
        child, parent = parent, facts.parents.get(parent)
    return start


# What a DDP wrapper answers the same way as the module inside it; everything else (the
# state dict, named parameters, the model's own attributes and methods) lives on `.module`.


def _reads_the_wrapped_name(facts: Facts, node: cst.CSTNode, model: Model, wrap: cst.BaseStatement) -> bool:
    """`node` reads the model's name where it holds the wrapper: after the wrap, with no
    rebinding of the name since, in the wrap's function (or anywhere, for `self.` names)."""
    return not _before_wrap(facts, node, wrap) and not _rebound_since_wrap(facts, node, model.name, wrap) and (
        model.name.startswith("self.") or facts.function_of(node) is facts.function_of(wrap))


def _unwrap_attributes(facts: Facts, edits: Edits, model: Model, wrap: cst.BaseStatement) -> None:
    """After the wrap, `model.state_dict()`, `model.hidden` and `model.generate()` read the
    raw module, whether the model was wrapped (torchrun) or not (plain python); so does
    `torch.save(model, f)`, which would otherwise pickle the DDP wrapper."""
    holders = facts.model_holders(model)
    _unwrap_pickled_models(facts, edits, model, wrap, holders)
    _unwrap_for_helpers(facts, edits, model, wrap)
    for value in [*_type_reads(facts, model.name), *_container_entries(facts, model.name)]:
        if _reads_the_wrapped_name(facts, value, model, wrap):
            edits.expressions[value] = _unwrapped(model.name, edits, _quote_for(facts, value))
            edits.report("DDP103", value)
    _unwrap_in_callees(facts, edits, model, holders, wrap)
    for call in _derivations(facts, model.name):
        copied = call.args[0].value
        if _reads_the_wrapped_name(facts, call, model, wrap):
            edits.expressions[copied] = _unwrapped(model.name, edits, _quote_for(facts, copied))
            edits.report("DDP103", copied)
    # An attribute set on the wrapper (`model.hidden = None` to reset an RNN's state) would
    # stay on the wrapper, where the module's forward never reads it: it is set on the module,
    # as its reads are made there.
    accesses = [*facts.attribute_reads.get(model.name, ()), *facts.attribute_writes.get(model.name, ())]
    routed = method_forwards.routed_methods(facts, model)
    for access in sorted(accesses, key=facts.start_of):
        if access.attr.value in names.WRAPPER_ATTRIBUTES or _under_wrapper_check(facts, access, model.name) \
                or access in routed:
            continue
        if _before_wrap(facts, access, wrap) or _rebound_since_wrap(facts, access, model.name, wrap) \
                or _read_of_another_model(facts, model, access) \
                or _handed_only_before_the_wrap(facts, model, access, wrap):
            continue
        edits.expressions[access.value] = _unwrapped(model.name, edits, _quote_for(facts, access))
        edits.report("DDP103", access)
    _unwrap_indexes(facts, edits, model, wrap)
    _unwrap_dict_entries(facts, edits, model, wrap)
    _unwrap_for_exporters(facts, edits, model, wrap)
    _unwrap_on_instances(facts, edits, model)


def _handed_only_before_the_wrap(facts: Facts, model: Model, node: cst.CSTNode, wrap: cst.BaseStatement) -> bool:
    """`def restore(network, path): network.load_state_dict(...)`, a function whose parameter
    has the model's name, which the model's function hands the model only before the wrap
    (`network = restore(network, path)` in the branch the wrap follows): it gets the module."""
    function = facts.function_of(node)
    return function is not None and model.name in parameter_names(function) \
        and _handed_to_only_before_the_wrap(facts, model, function, wrap)


def _handed_to_only_before_the_wrap(facts: Facts, model: Model, function: cst.FunctionDef,
                                    wrap: cst.BaseStatement) -> bool:
    """`function` runs only where the model's function calls it before the wrap (every call
    of it in the file is such a call, handing it the model): what it is handed is the module."""
    if function is model.function:
        return False
    handing = {call for callee, _, call in facts._calls_passing(model.name, model.function) if callee is function}
    calls = facts.calls_of(function)
    return bool(calls) and all(call in handing and _before_wrap(facts, call, wrap) for call in calls)


def _read_of_another_model(facts: Facts, model: Model, node: cst.CSTNode) -> bool:
    """A read in another function that builds and trains a model of the same name of its
    own (`pretrain()` and `finetune()` each with its `net`): that model, wrapped there."""
    function = facts.function_of(node)
    return function is not None and function is not model.function and model.name not in parameter_names(
        function) and facts.binds_locally(function, model.name) and any(
        other.name == model.name and other.function is function for other in facts.models)


def _unwrap_pickled_models(facts: Facts, edits: Edits, model: Model, wrap: cst.BaseStatement,
                           holders: set[Holder]) -> None:
    """The model, or a parameter it is handed in as (`def save_checkpoint(epoch, model)`),
    pickled whole (`torch.save(model, path)`): the raw module, not the DDP wrapper."""
    for call in facts.save_calls:
        if not call.args or _before_wrap(facts, call, wrap):
            continue
        for saved in _saved_values(facts, call.args[0].value):
            name = dotted_name(saved)
            if name == model.name and _rebound_since_wrap(facts, saved, name, wrap):
                continue
            if name is not None and (name == model.name or _held_at(facts, holders, saved, name)):
                edits.expressions[saved] = _unwrapped(name, edits)
                edits.report("DDP103", saved)


def _unwrap_for_exporters(facts: Facts, edits: Edits, model: Model, wrap: cst.BaseStatement) -> None:
    """`torch.jit.script(model)`, `torch.jit.trace(model, x)`, `torch.onnx.export(model, x,
    path)` after the wrap: the raw module. A DDP wrapper does not script (its forward takes
    *inputs), and an exported file should hold the model, as a checkpoint does. So do the
    calls that run its forward to show it (`summary(model, input_size)`, `thop.profile`,
    `writer.add_graph(model, x)`: names.MODEL_INSPECTORS), which rank 0 often makes alone: the
    module's forward joins no collective, and the table shows the model as it did before."""
    calls = [call for qualified in sorted(names.MODEL_EXPORTERS | names.MODEL_INSPECTORS)
             for call in facts.calls_named.get(qualified, ())]
    calls += [call for callee, found in sorted(facts.calls_by_callee.items())
              if "." in callee and callee.rsplit(".", 1)[1] in names.INSPECTING_METHODS for call in found]
    for call in calls:
        positional = [arg for arg in call.args if arg.keyword is None and not arg.star][:1] or [
            arg for arg in call.args if arg.keyword is not None and arg.keyword.value == "model"]
        if not positional or dotted_name(positional[0].value) != model.name:
            continue
        if _before_wrap(facts, call, wrap) or _rebound_since_wrap(facts, call, model.name, wrap):
            continue
        value = positional[0].value
        edits.expressions[value] = _unwrapped(model.name, edits, _quote_for(facts, value))
        edits.report("DDP103", value)


def _unwrap_dict_entries(facts: Facts, edits: Edits, model: Model, wrap: cst.BaseStatement) -> None:
    """Rule: the wrapped model stored in a dict literal under a string key (`render_kwargs =
    {"network_fn": model, ...}`), that dict read by the key (`render_kwargs["network_fn"]`) in
    its own function or, where the function returns it (alone or in a tuple), in the
    function that unpacks the call: its state dict is read through `.module`
    (`getattr(d["network_fn"], "module", d["network_fn"]).state_dict()`), so that the
    checkpoint keeps the single-GPU keys and loads into the raw model on resume."""
    for holder, function, key in _dicts_holding(facts, model, wrap):
        for subscript in facts.nodes_of(cst.Subscript):
            if dotted_name(subscript.value) != holder or _string_key(subscript) != key:
                continue
            if facts.function_of(subscript) is not function or _before_wrap(facts, subscript, wrap):
                continue
            read = facts.parents.get(subscript)
            call = facts.parents.get(read) if isinstance(read, cst.Attribute) else None
            if not (isinstance(read, cst.Attribute) and read.attr.value in _STATE_DICT_METHODS
                    and isinstance(call, cst.Call) and call.func is read):
                continue
            edits.expressions[subscript] = _unwrapped(edits.code(subscript), edits)
            edits.report("DDP103", subscript)


def _dicts_holding(facts: Facts, model: Model,
                   wrap: cst.BaseStatement) -> list[tuple[str, Optional[cst.FunctionDef], str]]:
    """(name, function, key): where a dict literal holding the wrapped model by a string key
    is named, in its own function or in the callers that unpack the function's return."""
    found: list[tuple[str, Optional[cst.FunctionDef], str]] = []
    for literal in facts.nodes_of(cst.Dict):
        if facts.function_of(literal) is not facts.function_of(wrap) or _before_wrap(facts, literal, wrap):
            continue
        keys = [_literal_string(element.key) for element in literal.elements
                if isinstance(element, cst.DictElement) and dotted_name(element.value) == model.name]
        for key in [key for key in keys if key is not None]:
            found.extend((name, function, key) for name, function in _names_of_value(facts, literal))
    return found


def _names_of_value(facts: Facts, value: cst.BaseExpression) -> list[tuple[str, Optional[cst.FunctionDef]]]:
    """`d = {...}` in its function; `return d` or `return d, other` (or the literal itself
    returned): the names the callers bind it to (`d2, other = make(...)`)."""
    parent = facts.parents.get(value)
    function = facts.function_of(value)
    if isinstance(parent, cst.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0].target, cst.Name):
        name = parent.targets[0].target.value
        found = [(name, function)]
        if function is not None:
            for returned in facts.own_statements(function, cst.Return):
                found.extend(_bound_by_callers(facts, function, returned.value, name))
        return found
    return []


def _bound_by_callers(facts: Facts, function: cst.FunctionDef, returned: Optional[cst.BaseExpression],
                      name: str) -> list[tuple[str, Optional[cst.FunctionDef]]]:
    if returned is None:
        return []
    elements = [element.value for element in returned.elements] if isinstance(returned, cst.Tuple) else [returned]
    positions = [index for index, element in enumerate(elements) if dotted_name(element) == name]
    if len(positions) != 1:
        return []
    position, found = positions[0], []
    for call in facts.calls_of(function):
        assign = facts.parents.get(call)
        if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
            continue
        target = assign.targets[0].target
        if isinstance(target, cst.Tuple) and isinstance(returned, cst.Tuple) and len(target.elements) == len(elements):
            bound = target.elements[position].value
        elif not isinstance(returned, cst.Tuple):
            bound = target
        else:
            continue
        if isinstance(bound, cst.Name):
            found.append((bound.value, facts.function_of(call)))
    return found


def _string_key(subscript: cst.Subscript) -> Optional[str]:
    if len(subscript.slice) != 1 or not isinstance(subscript.slice[0].slice, cst.Index):
        return None
    return _literal_string(subscript.slice[0].slice.value)


def _literal_string(node: Optional[cst.BaseExpression]) -> Optional[str]:
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _unwrap_indexes(facts: Facts, edits: Edits, model: Model, wrap: cst.BaseStatement) -> None:
    """`model[0].weight`, `model[:-1](x)`, `len(model)`, `for layer in model:`: a DDP wrapper
    has no layers to index, count or iterate (TypeError: 'DistributedDataParallel' object is
    not subscriptable); the Sequential or ModuleList inside has."""
    for use in _layer_uses_of(facts.module, model.name):
        if _before_wrap(facts, use, wrap) or _rebound_since_wrap(facts, use, model.name, wrap):
            continue
        edits.expressions[use] = _unwrapped(model.name, edits, _quote_for(facts, use))
        edits.report("DDP103", use)


# Builtins that count or iterate their first argument's items.
_ITERATING_BUILTINS = frozenset({"len", "iter", "enumerate", "list", "tuple", "reversed"})


def _layer_uses_of(module: cst.Module, name: str) -> list[cst.BaseExpression]:
    """The spellings of `name` that index, count or iterate it."""
    found: list[cst.BaseExpression] = []
    for node in within(module):
        if isinstance(node, cst.Subscript):
            if dotted_name(node.value) == name:
                found.append(node.value)
        elif isinstance(node, cst.Call):
            if isinstance(node.func, cst.Name) and node.func.value in _ITERATING_BUILTINS and node.args \
                    and node.args[0].keyword is None and not node.args[0].star \
                    and dotted_name(node.args[0].value) == name:
                found.append(node.args[0].value)
        elif isinstance(node, (cst.For, cst.CompFor)) and dotted_name(node.iter) == name:
            found.append(node.iter)
    return found


def _unwrap_on_instances(facts: Facts, edits: Edits, model: Model) -> None:
    """`torch.save(trainer.model.state_dict(), path)` after `trainer.fit()`, where the class
    wraps `self.model`, or keeps as `self.model` the model wrapped here: outside the class
    the attribute holds the wrapper too, so its own attributes and a whole-model save go
    through `getattr(trainer.model, "module", ...)` (the same value with or without the
    wrap, whichever runs first)."""
    spellings = [*facts.attribute_on_instances(model.name, model.function),
                 *facts.kept_on_instances.get(model.name, ())]
    for spelling in spellings:
        for call in facts.save_calls:
            for saved in _saved_values(facts, call.args[0].value) if call.args else ():
                if dotted_name(saved) == spelling:
                    edits.expressions[saved] = _unwrapped(spelling, edits)
                    edits.report("DDP103", saved)
        accesses = [*facts.attribute_reads.get(spelling, ()), *facts.attribute_writes.get(spelling, ())]
        for access in sorted(accesses, key=facts.start_of):
            if access.attr.value in names.WRAPPER_ATTRIBUTES or _under_wrapper_check(facts, access, spelling):
                continue
            edits.expressions[access.value] = _unwrapped(spelling, edits, _quote_for(facts, access))
            edits.report("DDP103", access)


def _unwrap_in_callees(facts: Facts, edits: Edits, model: Model, holders: set[Holder],
                       wrap: cst.BaseStatement) -> None:
    """`def sample(net, n): return net.decode(torch.randn(n, net.latent_dim))` called as
    `sample(model, 4)`: a function of this file that the model is handed to under another
    name may receive the wrapper, so the model's own attributes and methods are read there
    through `getattr(net, "module", net)` too (the same value flow that follows the model
    into helpers for its state dict). The same holds for a class of this file handed the
    model (`Solver(net, loader, opt)`, by position, keyword or a setter) that keeps it as
    `self.model`: in every method of that class `self.model.state_dict()` is read through
    `getattr(self.model, "module", self.model)`. In a function that trains, only the state
    dict (`state_dict()`, `load_state_dict()`) is read through `.module`, which runs no
    forward: a method that runs the forward there must go through the wrapper, or its
    gradients are not synchronised. Either way the checkpoint keeps the single-GPU keys.
    Not a function the model's own function hands it to only before the wrap (`model =
    load_checkpoint(model, path)` in the branch the wrap follows): it gets the module."""
    for function, name in holders:
        if function is None or name == model.name:
            continue
        if name.startswith("self."):
            owner = facts.class_of(function)
            if owner is None:
                continue
            methods = {method for method in owner.body.body if isinstance(method, cst.FunctionDef)}
        elif name in parameter_names(function) and not _handed_to_only_before_the_wrap(facts, model, function, wrap):
            methods = {function}
        else:
            continue
        # `def reset_state(net): net.hidden = None`: set on the module wherever it is set.
        for write in facts.attribute_writes.get(name, ()):
            if facts.function_of(write) in methods and write.attr.value not in names.WRAPPER_ATTRIBUTES:
                edits.expressions[write.value] = _unwrapped(name, edits)
                edits.report("DDP103", write)
        for access in facts.attribute_reads.get(name, ()):
            where = facts.function_of(access)
            if where not in methods or access.attr.value in names.WRAPPER_ATTRIBUTES:
                continue
            if where in facts.training_functions and not (
                    access.attr.value in _STATE_DICT_METHODS and _called(facts, access)):
                continue
            if not _under_wrapper_check(facts, access, name):
                edits.expressions[access.value] = _unwrapped(name, edits, _quote_for(facts, access))
                edits.report("DDP103", access)
    _unwrap_derivations_in_callees(facts, edits, model, holders, wrap)


def _unwrap_derivations_in_callees(facts: Facts, edits: Edits, model: Model, holders: set[Holder],
                                   wrap: cst.BaseStatement) -> None:
    """Rule: `self.ema = AveragedModel(model)` in `Trainer.__init__(self, model, ...)`, or
    `copy.deepcopy(model)` in an EMA class of this file, handed the model (under its own name
    or another): the copy is made of `getattr(model, "module", model)`, the module and not the
    wrapper. A copy of the DDP wrapper would run DDP's own collectives in every forward of the
    averaged model, and its checkpoint keys would carry one "module." more than the
    single-GPU script's. (In the model's own function _unwrap_attributes does this; a
    function the model's own function hands it to only before the wrap gets the module.)"""
    handed = [(callee, _before_wrap(facts, call, wrap)) for callee, _, call in facts._calls_passing(
        model.name, model.function)]
    for function, name in holders:
        if function is None or function is model.function or name.startswith("self.") \
                or name not in parameter_names(function):
            continue
        before = [early for callee, early in handed if callee is function]
        if before and all(before):
            continue
        for call in _derivations(facts, name):
            if facts.function_of(call) is function and not _copier_handed_the_model(facts, call, holders):
                copied = call.args[0].value
                edits.expressions[copied] = _unwrapped(name, edits, _quote_for(facts, copied))
                edits.report("DDP103", copied)


# A module's own state dict methods: on a DDP wrapper their keys carry a "module." prefix.
_STATE_DICT_METHODS = frozenset({"state_dict", "load_state_dict"})


def _held_at(facts: Facts, holders: set[Holder], node: cst.CSTNode, name: Optional[str]) -> bool:
    """Does `name` at node hold the model: a holder of that function, or a `self.` attribute
    a method of the same class stored the model in."""
    function = facts.function_of(node)
    if name is None or function is None:
        return False
    if (function, name) in holders:
        return True
    owner = facts.class_of(function) if name.startswith("self.") else None
    return owner is not None and any(held == name and facts.class_of(holder) is owner for holder, held in holders)


def _saved_values(facts: Facts, saved: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The object torch.save pickles and the values of a dict, list or tuple it is made of
    (`{"epoch": epoch, "model": model}` pickles the whole model too), also when that was
    built in a name first (`state = {...}; torch.save(state, path)`)."""
    name = dotted_name(saved)
    if isinstance(saved, cst.Name) and name is not None:
        built = facts.assigned_values.get(name, [])
        if len(built) == 1 and isinstance(built[0], (cst.Dict, cst.List, cst.Tuple)):
            return [saved, *_saved_values(facts, built[0])]
    if isinstance(saved, cst.Dict):
        return [element.value for element in saved.elements if isinstance(element, cst.DictElement)]
    if isinstance(saved, (cst.List, cst.Tuple)):
        return [element.value for element in saved.elements if isinstance(element, cst.Element)]
    return [saved]


def _rebound_since_wrap(facts: Facts, node: cst.CSTNode, name: str, wrap: cst.BaseStatement) -> bool:
    """`model = Net()` again after the wrap (to load a checkpoint into): a plain module; or
    the module given back to the name once training is over (_unwrap_once_training_is_over)."""
    function = facts.function_of(node)
    if function is not facts.function_of(wrap):
        return _built_anew_before_in_its_function(facts, name, node)
    over = _move_after_training(facts, name, wrap)
    if over is not None and facts.start_of(facts.statement_of(over)) <= facts.start_of(node):
        return True
    return _rebound_between(facts, name, wrap, node)


def _built_anew_before_in_its_function(facts: Facts, name: str, node: cst.CSTNode) -> bool:
    """Rule: `def load_model(self): self.model = Model.from_pretrained(dir); self.model.to(
    self.device)`, a method other than the wrap's: the move there moves the module just built,
    never wrapped, and is the user's to keep (dropping it leaves a reloaded model on the CPU
    while its inputs go to the GPU). Only an attribute of the object (`self.model`), assigned
    on every path to the move (in a block that holds the move, before it) what a call of no
    function of this file makes (`net = fit(loader)` may hand back the wrapped model)."""
    function = facts.function_of(node)
    if function is None or not name.startswith("self."):
        return False
    for statement in facts.statements_touching.get(name, ()):
        if facts.function_of(statement) is not function or facts.start_of(statement) >= facts.start_of(node) \
                or not _assigns(statement, name) or _moves_itself(statement, name) \
                or not _made_outside_this_file(facts, statement, name):
            continue
        block = facts.parents.get(statement)
        if block is not None and facts.ancestor_in(node, block) is not None:
            return True
    return False


def _made_outside_this_file(facts: Facts, statement: cst.BaseStatement, name: str) -> bool:
    """`self.model = self.model_class.from_pretrained(path)`: a call of nothing this file
    defines, neither a function nor a method of its classes (`self.build()`)."""
    for small in statement.body if isinstance(statement, cst.SimpleStatementLine) else ():
        if isinstance(small, cst.Assign) and any(dotted_name(t.target) == name for t in small.targets):
            value = small.value
            return isinstance(value, cst.Call) and (dotted_name(value.func) or "") not in facts.functions \
                and facts.method_called(value) is None
    return False


def _rebound_between(facts: Facts, name: str, wrap: cst.BaseStatement, node: cst.CSTNode) -> bool:
    function = facts.function_of(node)
    for statement in facts.statements_touching.get(name, ()):
        if (facts.function_of(statement) is function
                and facts.end_of(wrap) <= facts.start_of(statement) < facts.start_of(node)
                and _assigns(statement, name) and not _moves_itself(statement, name)):
            return True
    return False


def _assigns(statement: cst.BaseStatement, name: str) -> bool:
    """`model = Net()`; not `model = train_model(model, ...)`, which hands the same (wrapped)
    model back, nor `model = model.train()` / `model = model.eval()`, which return the module
    (or its DDP wrapper) itself: a mode switch in the loop, not a model built anew."""
    return isinstance(statement, cst.SimpleStatementLine) and any(
        isinstance(small, cst.Assign) and any(dotted_name(t.target) == name for t in small.targets)
        and not _passes(small.value, name) and not _switches_mode(small.value, name)
        for small in statement.body)


def _switches_mode(value: cst.BaseExpression, name: str) -> bool:
    return isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value in (
        "train", "eval") and dotted_name(value.func.value) == name


def _passes(value: cst.BaseExpression, name: str) -> bool:
    return isinstance(value, cst.Call) and any(dotted_name(arg.value) == name for arg in value.args)


def _moves_itself(statement: cst.BaseStatement, name: str) -> bool:
    """`model = model.cpu()`, `model = model.eval().to(device)`: the same object, moved."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    for small in statement.body:
        if isinstance(small, cst.Assign) and any(dotted_name(t.target) == name for t in small.targets):
            receiver = small.value
            while isinstance(receiver, cst.Call) and isinstance(receiver.func, cst.Attribute) \
                    and receiver.func.attr.value in _SELF_RETURNING_METHODS:
                receiver = receiver.func.value
            return receiver is not small.value and dotted_name(receiver) == name
    return False


# nn.Module methods that return the module itself.
_SELF_RETURNING_METHODS = frozenset({"cpu", "cuda", "to", "eval", "train", "float", "half", "double", "bfloat16"})


def _before_wrap(facts: Facts, node: cst.CSTNode, wrap: cst.BaseStatement) -> bool:
    """In the wrap's function, before the wrap or inside the statement it follows; in the
    __init__ of the wrap's class (which runs before any method of the instance); or in a
    method of the same class that only the wrap's function calls, each time before the wrap
    (`self.enable_gpu(flag)` in __init__, whose body moves the model: _calls_of_methods_moving)."""
    function, wrapping = facts.function_of(node), facts.function_of(wrap)
    if function is wrapping:
        return facts.start_of(node) < facts.end_of(wrap)
    if function is None or wrapping is None or facts.class_of(function) is None \
            or facts.class_of(function) is not facts.class_of(wrapping):
        return False
    if function.name.value == "__init__":
        # The instance's other methods run only after its __init__ has made it: a move there
        # comes first, unless __init__ itself calls the wrap's method before the move.
        return not any(facts.function_of(call) is function and facts.start_of(call) < facts.start_of(node)
                       for call in facts.calls_of(wrapping))
    calls = facts.calls_of(function)
    return bool(calls) and all(facts.function_of(call) is wrapping and facts.start_of(call) < facts.end_of(wrap)
                               for call in calls)


def _unwrapped(name: str, edits: Edits, quote: str = '"') -> Rewrite:
    return lambda _node: edits.expression(f"getattr({name}, {quote}module{quote}, {name})")


def _quote_for(facts: Facts, node: cst.CSTNode) -> str:
    """Inside an f-string, the quote the f-string itself does not use (before Python 3.12
    an f-string cannot contain its own quote)."""
    parent = facts.parents.get(node)
    while parent is not None and not isinstance(parent, cst.BaseStatement):
        if isinstance(parent, cst.FormattedString):
            return "'" if '"' in parent.start else '"'
        parent = facts.parents.get(parent)
    return '"'


def _reported_container_never_called(facts: Facts, edits: Edits, model: Model) -> bool:
    """Rule: the model the optimizer trains is an nn.ModuleList or nn.ModuleDict
    (`self.model = nn.ModuleList([self.encoder, self.decoder])`, then
    `Adam(self.model.parameters())`), while the training calls the modules it holds by their
    own names. A container is never called, so a DDP wrap of it never runs a forward: its
    reducer is never readied and the gradients are silently not all-reduced (the ranks
    drift apart, with no error). Which entries to wrap is the user's call: reported
    (DDP903), left as it was."""
    values = facts.assigned_values.get(model.name, [])
    containers = {id(call) for qualified in names.MODULE_CONTAINERS for call in facts.calls_named.get(qualified, ())}
    if not values or not all(id(value) in containers for value in values):
        return False
    edits.report("DDP903", values[0], (
        f"`{model.name}` is a container of modules, which is never called: a DDP wrap of it would never "
        f"all-reduce the gradients; wrap each module it holds that the training calls in DDP by hand, after it "
        f"reaches its device, and build the container from their `.module`"))
    return True


def _report_parts_called_apart(facts: Facts, edits: Edits) -> None:
    """`self.nets.G(z)` trained on its own, where only `self.nets` (an nn.ModuleDict moved as
    a whole) reaches its device and is never called: ddpify wraps no such part (DDP903)."""
    for part, holder in facts.parts_called_apart:
        edits.report("DDP903", part.optimizer_statement, (
            f"`{part.name}` is trained and called on its own, while `{holder}`, which holds it, reaches its device "
            f"and is never called: a DDP wrap of `{holder}` would never run; wrap `{part.name}` in DDP by hand "
            f"after `{holder}` reaches its device"))


def _replace_data_parallel(facts: Facts, edits: Edits) -> None:
    """One process per GPU replaces DataParallel: its wrap goes, the DDP wrap takes over, and
    `isinstance(model, DataParallel)` asks about DDP instead."""
    for call in facts.data_parallel_calls:
        edits.report("DDP102", call)
        wrapped = call.args[0].value if call.args else None
        statement = facts.statement_of(call)
        if _assigns_back(statement, call, wrapped):
            _remove_data_parallel_wrap(facts, edits, statement)
        elif _assigns_back_beside_others(facts, call, wrapped):
            # `G.cuda(); G = nn.DataParallel(G)`: the wrap goes, the move stays on its line.
            edits.removed_from_lines.add(cast(cst.BaseSmallStatement, facts.parents[call]))
        elif wrapped is not None:
            # The module as rewritten (`DataParallel(G.cuda())` -> `G.to(device)`), not as written.
            edits.expressions[call] = _first_argument
    for reference in facts.data_parallel_references:
        edits.expressions[reference] = lambda _node: cst.Name("DDP")
        edits.imports.add("DDP")
    forwards = [call for qualified in names.DATA_PARALLEL_FUNCTION for call in facts.calls_named.get(qualified, ())]
    for call in forwards:
        _call_the_module_itself(edits, call)
    if facts.data_parallel_calls or facts.data_parallel_references or forwards:
        edits.unused_imports.update(names.DATA_PARALLEL_IMPORTS)
        edits.unused_imports.update(facts.data_parallel_imports)
    _load_without_module_prefix(facts, edits)
    _drop_data_parallel_callbacks(facts, edits)
    for call in facts.unreadable_data_parallel_calls:
        edits.report("DDP903", call, (
            f"`{edits.code(call.func)}(...)` is a DataParallel whose constructor does not take the module first, so "
            f"ddpify cannot tell which module it wraps: replace it with the module itself (DDP takes its place, "
            f"one process per device)"))


# data_parallel's parameters in order; one process per device has no use for the device ones.
_DATA_PARALLEL_PARAMETERS = ("module", "inputs", "device_ids", "output_device", "dim", "module_kwargs")


def _call_the_module_itself(edits: Edits, call: cst.Call) -> None:
    """Rule: `data_parallel(model, images)` (torch.nn.parallel's functional DataParallel)
    scatters the batch over every visible GPU from the first one, where it wants the module's
    parameters; under torchrun each rank's model sits on its own GPU and is the DDP wrapper,
    so it would fail on every rank but 0 of a machine, or replicate the wrapper. One process
    per device calls the module itself: `model(images)`, a tuple of inputs spread
    (`data_parallel(model, (x, mask))` -> `model(x, mask)`), `module_kwargs` passed as
    keywords; device_ids, output_device and dim go, by keyword or position
    (`data_parallel(self.main, input, range(self.ngpu))`). Arguments from `*`/`**` are
    reported (DDP903)."""
    positional = [arg.value for arg in call.args if arg.keyword is None and not arg.star]
    keywords = {arg.keyword.value: arg.value for arg in call.args if arg.keyword is not None}
    keywords.update(zip(_DATA_PARALLEL_PARAMETERS, positional))
    module, inputs = keywords.get("module"), keywords.get("inputs")
    extra = len(positional) > len(_DATA_PARALLEL_PARAMETERS) or any(arg.star for arg in call.args) or any(
        key not in _DATA_PARALLEL_PARAMETERS for key in keywords)
    if module is None or inputs is None or extra:
        edits.report("DDP903", call, (
            f"`{edits.code(call)}` runs a DataParallel forward in a form ddpify cannot read: call the module "
            "itself on its inputs (DDP takes DataParallel's place, one process per device)"))
        return
    if isinstance(inputs, cst.Tuple):
        arguments = [edits.code(element.value) if not isinstance(element, cst.StarredElement)
                     else f"*{edits.code(element.value)}" for element in inputs.elements]
    else:
        arguments = [edits.code(inputs)]
    kwargs = keywords.get("module_kwargs")
    if kwargs is not None:
        arguments.append(f"**{edits.code(kwargs)}")
    text = f"{edits.code(module)}({', '.join(arguments)})"
    edits.expressions[call] = lambda _node: edits.expression(text)
    edits.report("DDP102", call, (
        f"nn.DataParallel replaced by DistributedDataParallel: `{edits.code(call.func)}(...)`, DataParallel's "
        f"forward over every GPU, becomes `{text}`, one process per device"))


# What takes the place of such a call, once DataParallel is gone.
DATA_PARALLEL_CALLBACK_GONE_CODE = "pass  # {call}: a DataParallel hook, gone with DataParallel\n"


def _drop_data_parallel_callbacks(facts: Facts, edits: Edits) -> None:
    """Rule: `model = DataParallel(model)` then `patch_replication_callback(model)`: the helper
    asserts that it is handed a DataParallel, which ddpify has removed, so it would fail (on
    the GPU path that made the DataParallel). A line that only makes that call, on the name the
    DataParallel was assigned to (in the same function, or any method for a `self.` attribute),
    becomes a `pass` that says why; a call part of a larger statement is reported (DDP903)
    with its line."""
    targets: dict[str, Optional[cst.FunctionDef]] = {}
    for call in facts.data_parallel_calls:
        assign = facts.parents.get(call)
        while assign is not None and not isinstance(assign, (cst.Assign, cst.BaseStatement)):
            assign = facts.parents.get(assign)
        if isinstance(assign, cst.Assign) and len(assign.targets) == 1:
            target = dotted_name(assign.targets[0].target)
            if target is not None:
                targets[target] = facts.function_of(call)
    if not targets:
        return
    for call in sorted(_data_parallel_helper_calls(facts), key=facts.start_of):
        callee = edits.code(call.func)
        handed = dotted_name(call.args[0].value) if call.args else None
        if handed is None or handed not in targets or not (
                handed.startswith("self.") or facts.function_of(call) is targets[handed]):
            continue
        statement = facts.statement_of(call)
        if any(node in edits.removed for node in _ancestors(facts, statement)):
            edits.report("DDP102", call, (  # (gone with the branch that chose DataParallel)
                f"nn.DataParallel replaced by DistributedDataParallel: `{callee}({handed})`, a hook of DataParallel's "
                f"replicas that asserts it is handed one, goes with it"))
        elif _data_parallel_only_call(facts, statement):
            edits.replace(statement, [edits.statement(DATA_PARALLEL_CALLBACK_GONE_CODE.format(
                call=f"{callee}(...)")).with_changes(leading_lines=statement.leading_lines)])
            edits.report("DDP102", call, (
                f"nn.DataParallel replaced by DistributedDataParallel: `{callee}({handed})`, a hook of DataParallel's "
                f"replicas that asserts it is handed one, goes with it"))
        else:
            edits.report("DDP903", call, (
                f"`{callee}({handed})` is handed the DataParallel that ddpify removes, and it asserts it "
                f"is one: remove the call (one process per device has no replicas to patch)"))


WITHOUT_MODULE_PREFIX_HELPER = '''\


def without_module_prefix(state_dict):
    """A state dict saved from a DataParallel model, keyed `module.<name>`, as the unwrapped
    model names its tensors (a state dict without the prefix is returned as it is)."""
    torch.nn.modules.utils.consume_prefix_in_state_dict_if_present(state_dict, "module.")
    return state_dict
'''


def _load_without_module_prefix(facts: Facts, edits: Edits) -> None:
    """`model.load_state_dict(state)` where `model` was a DataParallel: the state was saved by
    it, keyed `module.<name>`, and loads into the model DataParallel no longer wraps once the
    prefix goes. The model is a name the DataParallel was assigned to, or a name bound from a
    call of a function here that returns one (`net = DataParallel(net).cuda(); return net`).
    Loads that the script runs after that binding (by line, in the same function; any method
    for a `self.` attribute) take `without_module_prefix(...)`, and so do the loads of a
    function here handed the model (`load_pretrained(tnet, ckpt["net"])` ->
    `def load_pretrained(model, state): ... model.load_state_dict(...)`). A load of the
    model's own state dict filtered by its keys (`own = model.state_dict()`;
    `{k: v for k, v in state.items() if k in own}`; `own.update(...)`) strips the prefix of
    the filtered state, before the filter: after it nothing would be left to load (silently,
    with `strict=False` or the update). Saves need nothing, since DDP103 saves the unwrapped model."""
    loads: dict[cst.Call, str] = {}  # each load, once (a factory may assign DataParallel in two branches)
    for target, function, line in _data_parallel_bindings(facts):
        for load in facts.calls_by_callee.get(f"{target}.load_state_dict", ()):
            if target.startswith("self.") or (facts.function_of(load) is function and facts.line_of(load) > line):
                loads.setdefault(load, target)
        if "." in target:
            continue
        for helper, parameter in _helpers_handed(facts, target, function, line):
            for load in facts.calls_by_callee.get(f"{parameter}.load_state_dict", ()):
                if facts.function_of(load) is helper:
                    loads.setdefault(load, parameter)
        for call, handed in facts.helper_state_loads.items():
            if facts.function_of(call) is function and facts.line_of(call) > line and any(
                    isinstance(value, cst.Name) and value.value == target for value in handed):
                _strip_prefix_of_handed_states(facts, edits, call, handed)
    for load, model in loads.items():
        _strip_prefix_on_load(facts, edits, load, model)


def _strip_prefix_of_handed_states(facts: Facts, edits: Edits, call: cst.Call,
                                   handed: list[cst.BaseExpression]) -> None:
    """`load_pretrained_model(tnet, checkpoint["net"])`, a helper of another module that loads
    a state into the model it is handed: the arguments read from a file (`torch.load(...)`,
    or a name bound to it, subscripted or not) go to it without the prefix, which the
    helper may otherwise filter out by the model's own keys."""
    loaded_names = {name for load in facts.calls_named.get("torch.load", ())
                    if facts.function_of(load) is facts.function_of(call)
                    for name in [_bound_name(facts, load)] if name}
    states = [arg for arg in call.args if not arg.star and arg.value not in handed
              and _read_from_file(facts, arg.value, loaded_names)]
    for arg in states:
        if arg in edits.expressions:
            continue
        edits.expressions[arg] = lambda node: cast(cst.Arg, node).with_changes(value=cst.Call(
            func=cst.Name("without_module_prefix"), args=[cst.Arg(value=cast(cst.Arg, node).value)]))
    if states:
        edits.add_helper("without_module_prefix", WITHOUT_MODULE_PREFIX_HELPER, "torch")
        edits.report("DDP112", call)


def _read_from_file(facts: Facts, value: cst.BaseExpression, loaded_names: set[str]) -> bool:
    """`torch.load(...)`, a name bound to it, or a subscript of either (`checkpoint["net"]`)."""
    while isinstance(value, cst.Subscript):
        value = value.value
    if isinstance(value, cst.Name):
        return value.value in loaded_names
    return isinstance(value, cst.Call) and value in facts.calls_named.get("torch.load", ())


def _data_parallel_bindings(facts: Facts) -> Iterable[tuple[str, Optional[cst.FunctionDef], int]]:
    """(name, function, line) of each name a DataParallel is assigned to, and of each name
    bound from a call of a function here that returns such a name (or moves it: `return
    model.cuda()`)."""
    for call in facts.data_parallel_calls:
        statement = facts.statement_of(call)
        if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
            continue
        assign = statement.body[0]
        if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
            continue
        target = dotted_name(assign.targets[0].target)
        if target is None:
            continue
        function = facts.function_of(call)
        yield target, function, facts.line_of(call)
        if function is None or "." in target or facts.functions.get(function.name.value) is not function:
            continue
        returns = [node for node in traversal.preorder(function, _outside_nested_definitions(function))
                   if isinstance(node, cst.Return)]
        if not any(_names_the_model(node.value, target) for node in returns):
            continue
        yield from _bound_from(facts, facts.calls_by_callee.get(function.name.value, ()))
    # Made by a function of another module of the project.
    yield from _bound_from(facts, sorted(facts.calls_returning_data_parallel, key=facts.start_of))


def _bound_from(facts: Facts, calls: Iterable[cst.Call]) -> Iterable[tuple[str, Optional[cst.FunctionDef], int]]:
    """(name, function, line) of `name = call` for each call."""
    for made in calls:
        bound = facts.parents.get(made)
        if isinstance(bound, cst.Assign) and len(bound.targets) == 1 and bound.value is made:
            name = dotted_name(bound.targets[0].target)
            if name is not None:
                yield name, facts.function_of(made), facts.line_of(made)


def _outside_nested_definitions(function: cst.FunctionDef) -> Callable[[cst.CSTNode], bool]:
    return lambda node: node is function or not isinstance(node, (cst.FunctionDef, cst.Lambda, cst.ClassDef))


def _names_the_model(node: Optional[cst.BaseExpression], target: str) -> bool:
    """`model`, `model.cuda()`, `model.to(device)`: what returns the model."""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in (
            "cuda", "to"):
        node = node.func.value
    return isinstance(node, cst.Name) and node.value == target


def _helpers_handed(facts: Facts, target: str, function: Optional[cst.FunctionDef],
                    line: int) -> Iterable[tuple[cst.FunctionDef, str]]:
    """(function, parameter) for each function here whose call, after `line` in `function`,
    hands it `target` (by position or keyword)."""
    for name, helper in facts.functions.items():
        if "." in name:
            continue
        parameters = [parameter.name.value for parameter in helper.params.params]
        for call in facts.calls_by_callee.get(name, ()):
            if facts.function_of(call) is not function or facts.line_of(call) <= line:
                continue
            for position, arg in enumerate(call.args):
                if arg.star or not (isinstance(arg.value, cst.Name) and arg.value.value == target):
                    continue
                if arg.keyword is not None and arg.keyword.value in parameters:
                    yield helper, arg.keyword.value
                elif arg.keyword is None and position < len(parameters):
                    yield helper, parameters[position]


def _strip_prefix_on_load(facts: Facts, edits: Edits, load: cst.Call, model: str) -> None:
    state = next((arg for arg in load.args if arg.keyword is None and not arg.star), None) or next(
        (arg for arg in load.args if arg.keyword is not None and arg.keyword.value == "state_dict"), None)
    if state is None or state in edits.expressions:
        return
    own = _own_state_names(facts, load, model)
    filtered = _filtered_states(facts, load, own, model)
    if state.value in filtered or (isinstance(state.value, cst.Name) and state.value.value in own | {
            name for name in (_bound_name(facts, comprehension) for comprehension in filtered) if name}):
        sources = [filtered[state.value]] if isinstance(state.value, cst.DictComp) and state.value in filtered \
            else list(filtered.values())
        for source in sources:
            if source not in edits.expressions:
                edits.expressions[source] = lambda node: cst.Call(
                    func=cst.Name("without_module_prefix"), args=[cst.Arg(value=cast(cst.BaseExpression, node))])
        if sources:
            edits.add_helper("without_module_prefix", WITHOUT_MODULE_PREFIX_HELPER, "torch")
            edits.report("DDP112", load)
        return
    # The argument, not its value: an edit of the value itself (`torch.load(path)` given its
    # map_location) is applied first, inside.
    edits.expressions[state] = lambda node: cast(cst.Arg, node).with_changes(value=cst.Call(
        func=cst.Name("without_module_prefix"), args=[cst.Arg(value=cast(cst.Arg, node).value)]))
    edits.add_helper("without_module_prefix", WITHOUT_MODULE_PREFIX_HELPER, "torch")
    edits.report("DDP112", load)


def _scope_nodes(facts: Facts, load: cst.Call) -> list[cst.CSTNode]:
    """The nodes of the function that holds `load` (the module's outside functions at module level)."""
    scope: cst.CSTNode = facts.function_of(load) or _root(facts, load)
    return list(traversal.preorder(scope, lambda node: node is scope or not isinstance(
        node, (cst.FunctionDef, cst.ClassDef))))


def _root(facts: Facts, node: cst.CSTNode) -> cst.CSTNode:
    while node in facts.parents:
        node = facts.parents[node]
    return node


def _own_state_names(facts: Facts, load: cst.Call, model: str) -> set[str]:
    """Names bound, where `load` is, to the model's own state dict (`own = model.state_dict()`)."""
    own = set()
    for node in _scope_nodes(facts, load):
        if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name) \
                and isinstance(node.value, cst.Call) and isinstance(node.value.func, cst.Attribute) \
                and node.value.func.attr.value == "state_dict" and dotted_name(node.value.func.value) == model:
            own.add(node.targets[0].target.value)
    return own


def _filtered_states(facts: Facts, load: cst.Call, own: set[str],
                     model: str) -> dict[cst.DictComp, cst.BaseExpression]:
    """`state` of each `{k: v for k, v in state.items() if k in own ...}` where `load` is, by
    its comprehension (`own` also `own.keys()`, `model.state_dict()` and its keys)."""
    sources = {}
    for node in _scope_nodes(facts, load):
        if not isinstance(node, cst.DictComp) or not isinstance(node.for_in.target, cst.Tuple):
            continue
        elements = node.for_in.target.elements
        iterated = node.for_in.iter
        if not elements or not isinstance(elements[0].value, cst.Name) or not (
                isinstance(iterated, cst.Call) and isinstance(iterated.func, cst.Attribute)
                and iterated.func.attr.value == "items" and not iterated.args):
            continue
        key = elements[0].value.value
        if any(isinstance(test, cst.Comparison) and isinstance(test.left, cst.Name) and test.left.value == key
               and any(isinstance(target.operator, cst.In) and _names_own(target.comparator, own, model)
                       for target in test.comparisons)
               for condition in node.for_in.ifs
               for test in traversal.preorder(condition.test, lambda _node: True)):
            sources[node] = iterated.func.value
    return sources


def _bound_name(facts: Facts, node: cst.CSTNode) -> Optional[str]:
    """`name` of `name = node`."""
    parent = facts.parents.get(node)
    if isinstance(parent, cst.Assign) and parent.value is node and len(parent.targets) == 1 and isinstance(
            parent.targets[0].target, cst.Name):
        return parent.targets[0].target.value
    return None


def _names_own(node: cst.BaseExpression, own: set[str], model: str) -> bool:
    """`own`, `model.state_dict()`, or their `.keys()`."""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "keys":
        node = node.func.value
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "state_dict":
        return dotted_name(node.func.value) == model
    return isinstance(node, cst.Name) and node.value in own


def _first_argument(node: cst.CSTNode) -> cst.CSTNode:
    """The updated call's first argument: what DataParallel wrapped, with its own edits."""
    return cast(cst.Call, node).args[0].value


def _assigns_back(statement: cst.BaseStatement, call: cst.Call, wrapped: Optional[cst.BaseExpression]) -> bool:
    """`model = nn.DataParallel(model)`: without the wrap the statement does nothing. Not
    `model = nn.DataParallel(model).to(device)`, whose move stays (`model = model.to(device)`)."""
    if wrapped is None or not isinstance(statement, cst.SimpleStatementLine):
        return False
    small = statement.body[0]
    return (
        len(statement.body) == 1 and isinstance(small, cst.Assign) and len(small.targets) == 1
        and small.value is call and dotted_name(small.targets[0].target) == dotted_name(wrapped) is not None
    )


def _assigns_back_beside_others(facts: Facts, call: cst.Call, wrapped: Optional[cst.BaseExpression]) -> bool:
    """`G.cuda(); G = nn.DataParallel(G)`: the assignment back of _assigns_back, sharing its
    line (or one-line suite) with other statements, which stay."""
    assign = facts.parents.get(call)
    line = facts.parents.get(assign) if assign is not None else None
    return isinstance(line, (cst.SimpleStatementLine, cst.SimpleStatementSuite)) and len(line.body) > 1 \
        and wrapped is not None and isinstance(assign, cst.Assign) and assign.value is call \
        and len(assign.targets) == 1 and dotted_name(assign.targets[0].target) == dotted_name(wrapped) is not None


# Calls a branch's test may make and still only read: removing the branch loses nothing.
_READING_CALLS = frozenset({"builtins.len", "builtins.isinstance", "builtins.hasattr", "builtins.getattr",
                            "builtins.min", "builtins.max", "torch.cuda.device_count",
                            "torch.cuda.is_available", "torch.accelerator.device_count",
                            "torch.accelerator.is_available"})

# What stays of a branch whose only statement was the DataParallel wrap, when the branch
# itself must stay (an `else:` follows, or its test does more than read).
DATA_PARALLEL_GONE_CODE = "pass  # one process per device: DDP below takes DataParallel's place\n"


def _remove_data_parallel_wrap(facts: Facts, edits: Edits, statement: Statement) -> None:
    """`model = DataParallel(model)` does nothing once DDP wraps the model, so it goes. The
    branch that only chose DataParallel (`if torch.cuda.device_count() > 1:`, `if
    len(device_ids) > 1:`: no other statement but output about it, no `else`, a test that
    only reads) goes with it, whatever its test reads. A branch that must stay (an `else`
    follows, or its test calls something that may do more) keeps its test, and its body
    says why it is empty instead of a bare `pass`; its output about DataParallel stays."""
    branch = _data_parallel_branch(facts, statement)
    if branch is not None and branch.orelse is None and _only_reads(facts, branch.test) \
            and isinstance(facts.parents.get(branch), (cst.IndentedBlock, cst.Module)):
        edits.removed.add(branch)
    elif branch is not None and facts.block_of(statement).body[0] is statement and not any(
            s in facts.output_statements for s in facts.block_of(statement).body):
        edits.replace(statement, [edits.statement(DATA_PARALLEL_GONE_CODE).with_changes(
            leading_lines=statement.leading_lines)])
    else:
        edits.removed.add(statement)


def _data_parallel_branch(facts: Facts, statement: Statement) -> Optional[cst.If]:
    """The `if` whose body holds only DataParallel wraps (`model = DataParallel(model)`, one
    per model: student and teacher) and output about them."""
    block = facts.block_of(statement)
    branch = facts.parents.get(block)
    if not isinstance(branch, cst.If) or branch.body is not block:
        return None
    wraps = {facts.statement_of(call) for call in facts.data_parallel_calls
             if _assigns_back(facts.statement_of(call), call, call.args[0].value if call.args else None)}
    others = [s for s in block.body if s is not statement]
    return branch if all(s in facts.output_statements or s in wraps or _data_parallel_only_call(facts, s)
                         for s in others) else None


def _ancestors(facts: Facts, node: cst.CSTNode) -> list[cst.CSTNode]:
    found = []
    current: Optional[cst.CSTNode] = node
    while current is not None:
        found.append(current)
        current = facts.parents.get(current)
    return found


def _data_parallel_helper_calls(facts: Facts) -> set[cst.Call]:
    """Calls of names.DATA_PARALLEL_ONLY_HELPERS, by the name written or the name imported."""
    return {call for found in (facts.calls_by_callee, facts.calls_named) for callee, calls in found.items()
            if callee.rsplit(".", 1)[-1] in names.DATA_PARALLEL_ONLY_HELPERS for call in calls}


def _data_parallel_only_call(facts: Facts, statement: cst.CSTNode) -> bool:
    """A line that only calls a helper of names.DATA_PARALLEL_ONLY_HELPERS."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return False
    small = statement.body[0]
    return isinstance(small, cst.Expr) and isinstance(small.value, cst.Call) \
        and small.value in _data_parallel_helper_calls(facts)


def _only_reads(facts: Facts, test: cst.BaseExpression) -> bool:
    """The test reads names, attributes, literals and calls of _READING_CALLS only."""
    reading = {call for qualified in _READING_CALLS for call in facts.calls_named.get(qualified, ())}
    return all(call in reading for call in find_all(test, cst.Call)) and not find_all(test, cst.NamedExpr)


def _unwrap_module_accesses(facts: Facts, edits: Edits, model: Model) -> None:
    """`model.module` exists only when distributed; a check such as isinstance(model, DDP)
    around it already makes it safe."""
    for access in facts.module_accesses.get(model.name, ()):
        if not _under_wrapper_check(facts, access, model.name):
            edits.expressions[access] = _unwrapped(model.name, edits)
            edits.report("DDP103", access)
            _unwrap_the_other_arm(facts, edits, access, model.name)


def _unwrap_where_data_parallel_went(facts: Facts, edits: Edits) -> None:
    """`scorer = nn.DataParallel(Scorer()).to(device)`, later `scorer.module.confidence`: once
    the DataParallel goes, the name holds the bare module, which has no `.module` (and a DDP
    wrap, where one comes, exists only when distributed). Every such read of the name that
    held the DataParallel, in the function that made it (any method of the class, for a
    `self.` attribute; the whole module, for a module-level name), reads
    `getattr(scorer, "module", scorer)`: the object DataParallel's `.module` was, on every
    path. A read under a check for the wrapper (`if hasattr(scorer, "module")`) stays; a
    model's own reads are DDP103's already."""
    for call in facts.data_parallel_calls:
        holder = _data_parallel_holder(facts, call)
        if holder is None:
            continue
        function = facts.function_of(call)
        owner = facts.class_of(function) if holder.startswith("self.") else None
        for access in facts.module_accesses.get(holder, ()):
            if access in edits.expressions or _under_wrapper_check(facts, access, holder):
                continue
            if owner is not None:
                if facts.class_of(facts.function_of(access)) is not owner:
                    continue
            elif function is not None and facts.function_of(access) is not function:
                continue
            edits.expressions[access] = _unwrapped(holder, edits, _quote_for(facts, access))
            edits.report("DDP103", access)
            _unwrap_the_other_arm(facts, edits, access, holder)
    if facts.data_parallel_calls or facts.data_parallel_in_project:
        _unwrap_reads_through_module(facts, edits)


def _unwrap_reads_through_module(facts: Facts, edits: Edits) -> None:
    """`module.module.state_dict()` in a checkpoint helper that was handed the DataParallel
    models of another module (`if self.data_parallel:`): the value is out of sight, but a
    read of something of a `.module` (`X.module.Y`) in a project whose DataParallel goes
    finds no `.module` where it found one. `getattr(X, "module", X)` is the same object
    wherever `.module` exists (a wrapper of the user's own keeps its meaning)."""
    for receiver, accesses in facts.module_accesses.items():
        if receiver == "self":
            continue  # a class's own `self.module`
        for access in accesses:
            parent = facts.parents.get(access)
            if access in edits.expressions or not (isinstance(parent, cst.Attribute) and parent.value is access) \
                    or _under_wrapper_check(facts, access, receiver):
                continue
            edits.expressions[access] = _unwrapped(receiver, edits, _quote_for(facts, access))
            edits.report("DDP103", access)
            _unwrap_the_other_arm(facts, edits, access, receiver)


def _unwrap_the_other_arm(facts: Facts, edits: Edits, access: cst.Attribute, name: str) -> None:
    """Rule: `net.module if use_cuda else net` (`{'net': ...}` of a checkpoint), also
    `model.state_dict() if args.ngpu == 1 else model.module.state_dict()`: DataParallel-era code
    that picks the module on both arms, by a test of its own that said when the DataParallel
    existed. The DDP wrapper exists whatever that test says (torchrun on CPU: `use_cuda` is
    False and `net` is the wrapper), so the other arm would pickle the wrapper or save
    `module.`-prefixed keys. Both arms mean the module: when the test only reads, the choice
    becomes the unwrapped arm alone (`getattr(net, "module", net)`); else the other arm reads
    through `getattr` too. A test of the wrapper itself (`hasattr(net, "module")`) never gets
    here (_under_wrapper_check)."""
    arm: cst.CSTNode = access
    parent = facts.parents.get(arm)
    while isinstance(parent, cst.Attribute) and parent.value is arm or isinstance(parent, cst.Call) \
            and parent.func is arm or isinstance(parent, cst.Subscript) and parent.value is arm:
        arm, parent = parent, facts.parents.get(parent)
    if not isinstance(parent, cst.IfExp):
        _unwrap_the_other_branch(facts, edits, access, name)
        return
    if parent in edits.expressions:
        return
    other = parent.orelse if parent.body is arm else parent.body
    rest = edits.code(arm)[len(edits.code(access)):]
    if edits.code(other) != name + rest:
        return
    if _only_reads(facts, parent.test):
        unwrapped_arm = "body" if parent.body is arm else "orelse"
        edits.expressions[parent] = lambda node: getattr(node, unwrapped_arm)
        return
    base: cst.BaseExpression = other
    while dotted_name(base) != name and isinstance(base, (cst.Attribute, cst.Call, cst.Subscript)):
        base = base.func if isinstance(base, cst.Call) else base.value
    if dotted_name(base) == name and base not in edits.expressions:
        edits.expressions[base] = _unwrapped(name, edits, _quote_for(facts, base))
        edits.report("DDP103", base)


def _unwrap_the_other_branch(facts: Facts, edits: Edits, access: cst.Attribute, name: str) -> None:
    """The same rule for statements: `if use_cuda: state = {'net': net.module, ...}` / `else:
    state = {'net': net, ...}`, the two lines alike but for `.module`. The `else` line reads
    `getattr(net, "module", net)` where it read `net`: the wrapper exists on both branches under
    torchrun. Not under a test of the wrapper itself (`if isinstance(net, nn.DataParallel):`)."""
    small = facts.parents.get(access)
    while small is not None and not isinstance(small, cst.BaseSmallStatement):
        small = facts.parents.get(small)
    line = facts.parents.get(small) if small is not None else None
    block = facts.parents.get(line) if line is not None else None
    clause = facts.parents.get(block) if block is not None else None
    if not (isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1 and isinstance(block, cst.IndentedBlock)
            and isinstance(clause, cst.If) and clause.body is block and isinstance(clause.orelse, cst.Else)):
        return
    test = edits.code(clause.test)
    if ("isinstance(" in test or "hasattr(" in test) and name in test:
        return
    others = clause.orelse.body.body if isinstance(clause.orelse.body, cst.IndentedBlock) else ()
    index = list(block.body).index(line)
    counterpart = others[index] if len(others) == len(block.body) else None
    if not isinstance(counterpart, cst.SimpleStatementLine) or len(counterpart.body) != 1:
        return
    other = counterpart.body[0]
    assert small is not None
    written, read = edits.code(small), edits.code(access)
    (line_at, column), (access_line, access_column) = facts.start_of(small), facts.start_of(access)
    offset = access_column - column
    if access_line != line_at or written[offset:offset + len(read)] != read \
            or edits.code(other) != written[:offset] + name + written[offset + len(read):]:
        return
    other_line, other_column = facts.start_of(other)
    for found in find_all(other, cst.Name):
        if found.value == name and facts.start_of(found) == (other_line, other_column + offset) \
                and found not in edits.expressions:
            edits.expressions[found] = _unwrapped(name, edits, _quote_for(facts, found))
            edits.report("DDP103", found)


def _data_parallel_holder(facts: Facts, call: cst.Call) -> Optional[str]:
    """The name a DataParallel is assigned to (`net = DataParallel(...)`, also through a
    chain such as `.to(device)` or `.eval()`), or None."""
    node: cst.CSTNode = call
    parent = facts.parents.get(node)
    while (isinstance(parent, cst.Attribute) and parent.value is node) or (
            isinstance(parent, cst.Call) and parent.func is node):
        node, parent = parent, facts.parents.get(parent)
    if not (isinstance(parent, cst.Assign) and parent.value is node and len(parent.targets) == 1):
        return None
    holder = dotted_name(parent.targets[0].target)
    if holder is None or holder.count(".") > 1 or ("." in holder and not holder.startswith("self.")):
        return None
    return holder


def _under_wrapper_check(facts: Facts, node: cst.CSTNode, model: str) -> bool:
    parent = facts.parents.get(node)
    while parent is not None and not isinstance(parent, (cst.SimpleStatementLine, cst.FunctionDef)):
        test = getattr(parent, "test", None)
        if isinstance(parent, (cst.IfExp, cst.If)) and test is not None:
            code = facts.module.code_for_node(test)
            if ("isinstance(" in code or "hasattr(" in code) and model in code:
                return True
        parent = facts.parents.get(parent)
    return False


_SEQUENTIAL = TRAINING.replace("torch.nn.Linear(4, 1)",
                               "torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 1))")
_BATCHNORM = TRAINING.replace("torch.nn.Linear(4, 1)",
                             "torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8))")

_MODEL_CLASS = TRAINING.replace("model = torch.nn.Linear(4, 1).to(device)\n", '''\
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 1))

    def thaw(self, epoch):
        self.body[0].requires_grad_(epoch > 0)

    def forward(self, x):
        return self.body(x)


model = Net().to(device)
''')

# An nn.Module that holds its network and optimizer and steps them itself.
SELF_STEPPING = '''\
import torch
from torch.utils.data import DataLoader, TensorDataset


class Learner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 1)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.1)

    def step(self, x, y):
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()


device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
learner = Learner().to(device)
loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
for epoch in range(3):
    for x, y in loader:
        learner.step(x.to(device), y.to(device))
'''

_FACTORY_FIT = """\
import torch
from torch.utils.data import DataLoader, TensorDataset

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)


def make():
    return torch.nn.{made}


def fit(model):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model


net = fit(make())
torch.save(net.state_dict(), "net.pt")
"""

_FUNCTIONAL_DATA_PARALLEL = "from torch.nn.parallel import data_parallel\n" + TRAINING.replace(
    "loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))",
    "loss = torch.nn.functional.mse_loss(data_parallel(model, x.to(device)), y.to(device))")

# A Solver that builds its network in __init__ and moves it at the top of train().
_SOLVER_MOVING_IN_TRAIN = """\
import torch
from torch.utils.data import DataLoader, TensorDataset


class Solver:
    def __init__(self, loader):
        self.loader = loader
        self.net = torch.nn.Linear(4, 1)
        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.1)

    def train_epoch(self):
        self.net.cuda()
        for x, y in self.loader:
            loss = torch.nn.functional.mse_loss(self.net(x.cuda()), y.cuda())
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()


solver = Solver(DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8))
for epoch in range(3):
    solver.train_epoch()
"""

# The module's model moved and trained in a function `main()` that reads it as a global.
_GLOBAL_MOVED_IN_MAIN = """\
import torch
from torch.utils.data import DataLoader, TensorDataset

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = torch.nn.Linear(4, 1)
loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)


def main():
    model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
"""

# An epoch function that moves the model it is handed, called in the epoch loop: wrapped once
# before the loop, the function's move kept for a plain module only; where the function picks
# its own device, the move cannot be made before the loop (DDP944).
_MOVED_EACH_EPOCH = """\
import torch
from torch.utils.data import DataLoader, TensorDataset

device = "cuda" if torch.cuda.is_available() else "cpu"


def train_fn(model, loader, optimizer, device):
    model.to(device)
    model.train()
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
for epoch in range(3):
    train_fn(model, loader, optimizer, device)
"""
_MOVED_TO_ITS_OWN_DEVICE = _MOVED_EACH_EPOCH.replace(
    "    model.to(device)\n",
    '    if not torch.cuda.is_available():\n        device = "cpu"\n    model.to(device)\n', 1)

# The module's model a placeholder, built under `global` by a function: wrapped there (once, or
# for each fold where each call builds a new module); refused (DDP122) when two functions bind it.
_PLACEHOLDER_BUILT_UNDER_GLOBAL = """\
import torch
from torch.utils.data import DataLoader, TensorDataset

model = None
optimizer = None
device = "cuda" if torch.cuda.is_available() else "cpu"


def build():
    global model, optimizer
    model = torch.nn.Linear(4, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def fit(loader):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
"""

CASES = (
    Emits(_PLACEHOLDER_BUILT_UNDER_GLOBAL + "build()\nfit(loader)\n", "DDP101",
          ("    model = torch.nn.Linear(4, 1).to(device)\n    if distributed:\n        model = DDP(",)),
    Emits(_PLACEHOLDER_BUILT_UNDER_GLOBAL + "for fold in range(2):\n    build()\n    fit(loader)\n", "DDP101"),
    Emits(_PLACEHOLDER_BUILT_UNDER_GLOBAL.replace("\n\ndef fit(", "\n\ndef cast_half():\n    global model\n"
                                                  "    model = model.half()\n\n\ndef fit(")
          + "build()\nfit(loader)\n", "DDP122"),
    Silent(_PLACEHOLDER_BUILT_UNDER_GLOBAL + "build()\nfit(loader)\n", "DDP122"),
    Emits(_MOVED_EACH_EPOCH, "DDP126", ("    if not isinstance(model, DDP):",)),
    Emits(_MOVED_TO_ITS_OWN_DEVICE, "DDP944", ()),
    # The module's model wrapped where `main()` moves it: declared global there (run once) or refused.
    Emits(_GLOBAL_MOVED_IN_MAIN + "\n\nmain()\n", "DDP120", ("    global model",)),
    Emits(_GLOBAL_MOVED_IN_MAIN + "\n\nfor _ in range(2):\n    main()\n", "DDP121"),
    # A move after the place found for the wrap, at the top of a pass run once per epoch:
    # kept, no wrap, DDP119 (a method run once moves first and is wrapped after the move,
    # branchwrap16's rule); a round trip once training runs is the DDP106 below.
    Emits(_SOLVER_MOVING_IN_TRAIN, "DDP119", ("        self.net.cuda()\n",)),
    Silent(_SOLVER_MOVING_IN_TRAIN.replace("        self.net.cuda()\n", "").replace(
        "        self.net = torch.nn.Linear(4, 1)\n", "        self.net = torch.nn.Linear(4, 1).cuda()\n"), "DDP119"),
    # The functional DataParallel forward becomes a call of the module (its device arguments
    # by keyword or position go); arguments from `*` are reported.
    Emits(_FUNCTIONAL_DATA_PARALLEL, "DDP102", ("mse_loss(model(x.to(device)), y.to(device))",)),
    Emits(_FUNCTIONAL_DATA_PARALLEL.replace("data_parallel(model, x.to(device))",
                                            "data_parallel(model, *(x.to(device),))"), "DDP903"),
    Emits(_FUNCTIONAL_DATA_PARALLEL.replace("data_parallel(model, x.to(device))",
                                            "data_parallel(model, (x.to(device),), [0], None, 0, {})"), "DDP102",
          ("mse_loss(model(x.to(device), **{}), y.to(device))",)),
    Emits(TRAINING.replace("torch.nn.Linear(4, 1)", "torch.nn.ModuleList([torch.nn.Linear(4, 1)])")
          .replace("model.parameters()", "model[0].parameters()"), "DDP903"),
    # Moved with the object, after __init__: no place in the class sees it on its device.
    Emits(SELF_STEPPING, "DDP903"),
    Silent(SELF_STEPPING.replace("self.net = torch.nn.Linear(4, 1)",
                                 "self.net = torch.nn.Linear(4, 1).to(device)"), "DDP903"),
    Emits(TRAINING, "DDP101", ("model = DDP(model, device_ids=[local_rank]",)),
    # Two backwards after one forward: reported; a forward before each, or a loss from a
    # detached output, is not.
    Emits(TRAINING.replace("        optimizer.zero_grad()\n        loss.backward()\n",
                           "        optimizer.zero_grad()\n        loss.backward(retain_graph=True)\n"
                           "        (2 * loss).backward()\n"), "DDP114"),
    Silent(TRAINING.replace("        optimizer.zero_grad()\n        loss.backward()\n",
                            "        optimizer.zero_grad()\n        loss.backward()\n"
                            "        again = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))\n"
                            "        again.backward()\n"), "DDP114"),
    Silent(TRAINING.replace("        optimizer.zero_grad()\n        loss.backward()\n",
                            "        optimizer.zero_grad()\n        out = model(x.to(device))\n"
                            "        first = out.detach().sum() * 0 + loss\n        first.backward()\n"
                            "        second = out.detach().mean()\n        second.requires_grad_()\n"
                            "        second.backward()\n"), "DDP114"),
    # A model made on its device by a factory of the file, inside the call that trains it:
    # the factory's call on a line of its own, then the wrap (a factory that does not move
    # it leaves nothing to wrap after).
    Emits(_FACTORY_FIT.format(made="Linear(4, 1).to(device)"), "DDP101",
          ("net = make()\nif distributed:\n    net = DDP(net, device_ids=[local_rank]", "net = fit(net)")),
    Emits(_FACTORY_FIT.format(made="Linear(4, 1)"), "DDP903"),
    # An optimizer over every module of a collection trains the modules it names.
    Emits(TRAINING.replace("model.parameters()", "[p for m in [model] for p in m.parameters()]"), "DDP101",
          ("model = DDP(model, device_ids=[local_rank]",)),
    Emits(TRAINING.replace("        loss.backward()\n",
                           "        x = x.to(device).requires_grad_(True)\n"
                           "        g, = torch.autograd.grad(model(x).sum(), x, create_graph=True)\n"
                           "        (g.norm() ** 2).backward()\n        loss.backward()\n"), "DDP113"),
    Silent(TRAINING.replace("        loss.backward()\n",
                            "        x = x.to(device).requires_grad_(True)\n"
                            "        g, = torch.autograd.grad(model(x).sum(), x)\n        loss.backward()\n"),
           "DDP113"),
    Silent(TRAINING.replace("import torch\n", "import torch\n\n\ndef penalty(net, x):\n"
                            "    x = x.requires_grad_(True)\n"
                            "    g, = torch.autograd.grad(net(x).sum(), x, create_graph=True)\n"
                            "    return (g.norm() - 1) ** 2\n\n", 1)
           .replace("        loss.backward()\n", "        gp = penalty(model, x.to(device))\n"
                    "        total = loss + 10 * gp\n        total.backward()\n"), "DDP113"),
    Silent(TRAINING.replace("        loss.backward()\n",
                            "        x = x.to(device).requires_grad_(True)\n"
                            "        g, = torch.autograd.grad(model(x).sum(), x, create_graph=True)\n"
                            "        gp = ((g.norm(2, dim=1) - 1) ** 2).mean() * 10\n"
                            "        total = loss + gp\n        total.backward()\n"), "DDP113"),
    Emits(TRAINING.replace("model = torch.nn.Linear(4, 1)", "model = torch.nn.DataParallel(torch.nn.Linear(4, 1))"),
          "DDP102", ("model = torch.nn.Linear(4, 1).to(device)",)),
    # A DataParallel subclass (defined here, or the synchronized-BatchNorm package's) is one:
    # its wrap goes, its class stays as it is.
    Emits(TRAINING.replace("model = torch.nn.Linear(4, 1)", "model = MyDataParallel(torch.nn.Linear(4, 1))")
          .replace("device = torch", "class MyDataParallel(torch.nn.DataParallel):\n    pass\n\n\ndevice = torch"),
          "DDP102", ("class MyDataParallel(torch.nn.DataParallel):", "model = torch.nn.Linear(4, 1).to(device)")),
    Emits(TRAINING.replace("model = torch.nn.Linear(4, 1)", "model = DPWC(torch.nn.Linear(4, 1))")
          .replace("import torch\n", "import torch\nfrom sync_batchnorm import DataParallelWithCallback as DPWC\n", 1),
          "DDP102", ("model = torch.nn.Linear(4, 1).to(device)",)),
    # One whose constructor takes something else first: what it wraps is unknown.
    Emits(TRAINING.replace("model = torch.nn.Linear(4, 1)", "model = SplitDataParallel(2, torch.nn.Linear(4, 1))")
          .replace("device = torch", "class SplitDataParallel(torch.nn.DataParallel):\n"
                   "    def __init__(self, first, *args):\n        super().__init__(*args)\n\n\ndevice = torch"),
          "DDP903"),
    Emits(TRAINING.replace("model = torch.nn.Linear(4, 1).to(device)",
                           'model = torch.nn.DataParallel(torch.nn.Linear(4, 1)).to(device)\n'
                           'model.load_state_dict(torch.load("last.pt"))'),
          "DDP112", ('model.load_state_dict(without_module_prefix(torch.load("last.pt"',)),
    Silent(TRAINING.replace("model = torch.nn.Linear(4, 1).to(device)",
                            'model = torch.nn.Linear(4, 1).to(device)\nmodel.load_state_dict(torch.load("last.pt"))'),
           "DDP112"),
    # A load filtered by the model's own keys: the prefix goes before the filter, or nothing is left.
    Emits(TRAINING.replace("model = torch.nn.Linear(4, 1).to(device)",
                           'model = torch.nn.DataParallel(torch.nn.Linear(4, 1)).to(device)\n'
                           'own = model.state_dict()\nstate = torch.load("last.pt")\n'
                           'model.load_state_dict({k: v for k, v in state.items() if k in own}, strict=False)'),
          "DDP112", ("for k, v in without_module_prefix(state).items() if k in own}, strict=False)",)),
    # A model made by a function that returns its DataParallel, loaded through a helper handed it.
    Emits(TRAINING.replace("model = torch.nn.Linear(4, 1).to(device)",
                           "def make():\n    net = torch.nn.DataParallel(torch.nn.Linear(4, 1))\n"
                           "    return net.to(device)\n\n\n"
                           "def restore(net, path):\n    net.load_state_dict(torch.load(path))\n\n\n"
                           'model = make()\nrestore(model, "last.pt")'),
          "DDP112", ("load_state_dict(without_module_prefix(torch.load(path",)),
    # The function returns something else: its result is no DataParallel's model.
    Silent(TRAINING.replace("model = torch.nn.Linear(4, 1).to(device)",
                            "def make():\n    net = torch.nn.DataParallel(torch.nn.Linear(4, 1))\n"
                            "    return torch.nn.Linear(4, 1).to(device)\n\n\n"
                            'model = make()\nmodel.load_state_dict(torch.load("last.pt"))'),
           "DDP112"),
    Emits(TRAINING + 'torch.save(model.state_dict(), "model.pt")\n', "DDP103",
          ('getattr(model, "module", model).state_dict()',)),
    Silent(TRAINING, "DDP103"),
    Emits(_BATCHNORM, "DDP104"),
    Silent(_BATCHNORM, "DDP104", Options(sync_batchnorm=True)),
    # A model with BatchNorm run on two batches before one backward (a GAN's discriminator).
    Emits(_BATCHNORM.replace("mse_loss(model(x.to(device)), y.to(device))",
                             "mse_loss(model(x.to(device)) - model(2 * x.to(device)), y.to(device))"),
          "DDP115", ("broadcast_buffers=False",)),
    Silent(_BATCHNORM, "DDP115"),
    # Twice, but nothing to broadcast: no BatchNorm.
    Silent(TRAINING.replace("mse_loss(model(x.to(device)), y.to(device))",
                            "mse_loss(model(x.to(device)) - model(2 * x.to(device)), y.to(device))"), "DDP115"),
    Emits(TRAINING.replace("model = torch.nn.Linear(4, 1).to(device)\n", '''\
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 1)
        self.unused = torch.nn.Linear(4, 1)

    def forward(self, x):
        return self.fc(x)


model = Net().to(device)
'''), "DDP105", ("find_unused_parameters=True",)),
    # A second head's output named but never read: its parameters get no gradient.
    Emits(TRAINING.replace("model = torch.nn.Linear(4, 1).to(device)\n", '''\
class TwoHeads(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(4, 8)
        self.head = torch.nn.Linear(8, 1)
        self.aux = torch.nn.Linear(8, 1)

    def forward(self, x):
        h = self.body(x)
        return self.head(h), self.aux(h)


model = TwoHeads().to(device)
''').replace("        loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))\n",
                 "        out, aux = model(x.to(device))\n"
                 "        loss = torch.nn.functional.mse_loss(out, y.to(device))\n"), "DDP105",
          ("find_unused_parameters=True",)),
    # The output an RNN's step drops comes from the part that computes the kept one: no
    # parameter goes without a gradient.
    Silent(TRAINING.replace("model = torch.nn.Linear(4, 1).to(device)\n", '''\
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = torch.nn.GRU(4, 8, batch_first=True)
        self.head = torch.nn.Linear(8, 1)

    def forward(self, x):
        out, hidden = self.rnn(x.unsqueeze(1))
        return self.head(out[:, -1]), hidden


model = Net().to(device)
''').replace("model(x.to(device))", "model(x.to(device))[0]"), "DDP105"),
    # A round trip to the CPU for a checkpoint while training goes on: the move goes, the
    # checkpoint is a CPU copy.
    Emits(TRAINING.replace("    print(epoch, loss.item())\n", "    model.cpu()\n    torch.save(model.state_dict(), "
                           "\"model.pt\")\n    model.to(device)\n"), "DDP106", ("tensor.cpu()",)),
    # Once training is over, a move only for the checkpoint goes too (a CPU copy is saved);
    # one the model is used after (a forward on CPU inputs) stays, on the module itself.
    Emits(TRAINING + 'model.cpu()\ntorch.save(model.state_dict(), "model.pt")\n', "DDP106", ("tensor.cpu()",)),
    Silent(TRAINING + 'model.cpu()\nprint(model(torch.randn(2, 4)))\n', "DDP106"),
    Emits(TRAINING + 'model.cpu()\nprint(model(torch.randn(2, 4)))\n', "DDP103",
          ('model = getattr(model, "module", model)', "model.cpu()")),
    Emits(_SEQUENTIAL.replace("for epoch in range(3):\n",
                              "for epoch in range(3):\n    model[0].requires_grad_(epoch < 2)\n"), "DDP111"),
    Silent(_SEQUENTIAL.replace("for epoch in range(3):\n",
                               "for epoch in range(3):\n    model.requires_grad_(epoch < 2)\n"), "DDP111"),
    # Through a loop variable: a test picks the part (DDP111); all of the model is safe.
    Emits(_SEQUENTIAL.replace("for epoch in range(3):\n", "for epoch in range(3):\n    for m in model.modules():\n"
                              "        if m is model[0]:\n            m.weight.requires_grad = epoch < 2\n"), "DDP111"),
    Silent(_SEQUENTIAL.replace("for epoch in range(3):\n", "for epoch in range(3):\n    for p in model.parameters():\n"
                               "        p.requires_grad = epoch < 2\n"), "DDP111"),
    # A method of the model's own class: thawing part of `self` after the wrap (DDP111);
    # toggling all of it is safe.
    Emits(_MODEL_CLASS.replace("for epoch in range(3):\n", "for epoch in range(3):\n    model.thaw(epoch)\n"),
          "DDP111"),
    Silent(_MODEL_CLASS.replace("self.body[0].requires_grad_(epoch > 0)", "self.requires_grad_(epoch > 0)")
           .replace("for epoch in range(3):\n", "for epoch in range(3):\n    model.thaw(epoch)\n"), "DDP111"),
)
