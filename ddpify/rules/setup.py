"""Process-group setup, this rank's device, the rank-0 guard and teardown (DDP001, DDP005).

The setup block goes where the script chose its device, so the diff reads as "the device
choice became a distributed setup"; it moves up only when earlier code already needs it.
"""
import textwrap
from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet
from typing import Optional, Union, cast

import libcst as cst

from ddpify.analysis import names, traversal
from ddpify.analysis.containers import container_moves
from ddpify.analysis.control import Facts, registering_group
from ddpify.analysis.facts import BlockItem, DeviceAssignment, Model, Statement
from ddpify.analysis.later_moves import caller_moving_after_the_build, entry_moves_of_containers_holding
from ddpify.analysis.nodes import (
    argument_among,
    assigned_names,
    calls_within,
    dotted_name,
    find_all,
    handed_for,
    names_bound_in,
    names_in,
    parameter_names,
    positional_parameters,
    returns_in,
    string_value,
    target_names,
    targets_bound_in,
)
from ddpify.diagnostics import Rule, Severity
from ddpify.emit import fsdp2
from ddpify.emit.ddp import (
    CPU_ONLY_CODE,
    EARLY_GROUP_CODE,
    EARLY_JOIN_CODE,
    EARLY_JOIN_COMMENT,
    ENVIRONMENT_CODE,
    IS_MAIN_CODE,
    IS_MAIN_FROM_ENVIRONMENT_CODE,
    IS_MAIN_HELPER,
    RANK_DEVICE,
    RANK_INDEX,
    REFINE_AFTER_EARLY_GROUP_CODE,
    REFINE_ANY_CODE,
    REFINE_ANY_GIVEN_CODE,
    REFINE_CODE,
    REFINE_GIVEN_STRING_CODE,
    REFINE_STRING_CODE,
    RUN_NOT_IMPORTED,
    SETUP_CODE,
    SETUP_COMMENT,
    TEARDOWN_CODE,
    TEARDOWN_IF_INITIALIZED,
    WORLD_SIZE_CODE,
)
from ddpify.emit.edits import Edits, Insertion
from ddpify.emit.imports import imports_of
from ddpify.plan import Plan
from ddpify.rules.cases import TRAINING, Emits, Silent

RULES = (
    Rule("DDP001", Severity.EDIT, "process-group setup inserted where the device is chosen",
         "Each torchrun process must join the process group and pin itself to LOCAL_RANK "
         "before it touches a GPU; under plain `python` nothing is initialised.",
         "Nothing to do."),
    Rule("DDP005", Severity.EDIT, "process group torn down at exit",
         "A process group left open can hang the launcher at exit and leaks NCCL resources.",
         "Nothing to do."),
    Rule("DDP009", Severity.EDIT, "setup in a function called more than once: the group is created once",
         "The device is chosen in a function that runs several times (a get_device() helper, "
         "or the __init__ of a Trainer built once per fold or per stage); a second "
         "init_process_group would raise.",
         "Nothing to do."),
    Rule("DDP010", Severity.WARNING, "the GPU is the default device: a shuffling DistributedSampler fails under it",
         "`torch.set_default_device(\"cuda\")` (or `torch.set_default_tensor_type(\"torch.cuda.FloatTensor\")`)"
         " makes torch.randperm allocate on the GPU, and DistributedSampler draws each epoch's order with "
         "a CPU generator: on a GPU machine iterating the loader raises \"Expected a 'cuda' generator "
         "device but found 'cpu'\" (pytorch/pytorch#61457). The setup still goes above the call, so "
         "that \"cuda\" is this rank's GPU, and the model is wrapped with its device_ids.",
         "Drop the default device and move the model and the batches with `.to(device)`, or set the "
         "default device back to the CPU around the loop over the loader; then silence this with "
         "`# ddpify: ignore[DDP010]`."),
    Rule("DDP011", Severity.INFO, "the script places nothing on a GPU: every rank trains on the CPU",
         "The script never chooses a device, so the migration keeps it on the CPU: each process "
         "torchrun starts trains there and the group uses Gloo (NCCL cannot all-reduce CPU tensors). "
         "On a GPU machine that is N CPU processes and idle GPUs. ddpify does not add the moves "
         "itself: every tensor the model meets would have to follow (batches, targets, hidden states "
         "and masks made in the forward), and one it missed fails only on the GPU.",
         "To train on GPUs, choose the device in the script (`device = \"cuda\" if "
         "torch.cuda.is_available() else \"cpu\"`), move the model and each batch with "
         "`.to(device)`, check that it runs on one GPU, and run ddpify again: the setup then "
         "gives each rank its own GPU."),
    Rule("DDP007", Severity.WARNING, "model moved to a device ddpify cannot follow",
         "The device comes from a function or value ddpify cannot read (`get_device()` of "
         "another module, a helper that may return \"cuda:0\"). The setup makes this rank's "
         "GPU the current one, so \"cuda\" means it; a fixed index (\"cuda:0\") would still "
         "put every rank on that GPU.",
         "Make the device this rank's own: `torch.device(\"cuda\", int(os.environ.get(\"LOCAL_RANK\", 0)))`, "
         "or \"cuda\" without an index, then silence this with `# ddpify: ignore[DDP007]`."),
)


def choose(facts: Facts) -> Plan:
    """Pick the scope of the setup: the device choice, else the training loop's function."""
    caller = _caller_of_every_training_function(facts)
    if caller is not None:
        function, block = caller
        if all(assignment.only_cpu for assignment in facts.device_assignments):
            # Every stage chooses the CPU by name (`device = torch.device("cpu")`): it stays
            # the CPU, so the group is Gloo and no accelerator is made current.
            return Plan(function, block, "device", None, cpu_only=True)
        # Each training function keeps its own device choice: "cuda" there is this rank's
        # GPU once the setup, run first in their one caller, has made it current.
        return Plan(function, block, "device", None, device_elsewhere=True)
    choice = _device_choice(facts)
    if choice:
        first = choice[0]
        block = _scope_block(facts, first.statement, first.function)
        dominating = facts.ancestor_in(choice[-1].statement, block)
        # A literal CPU choice (`torch.device("cpu")`) is the user's: kept, and the setup after
        # it finds the CPU (Gloo); only a choice that can be CUDA is replaced.
        if len(choice) == 1 and first.cuda_or_cpu and not first.is_string and not first.only_cpu \
                and dominating is first.statement:
            return Plan(first.function, block, first.name, first, device_is_index=first.is_index)
        bare = any(a.any_accelerator and a.statement is dominating for a in choice)
        return Plan(first.function, block, first.name, None, choice_statement=dominating,
                         bare_accelerator=bare, device_is_string=all(a.is_string for a in choice))
    named = _device_named_elsewhere(facts)
    if named is not None:
        device, statement, function = named
        given = not _read_from_a_module(facts, device if statement is None else statement)
        if statement is None:
            return Plan(function, function.body if function is not None else facts.module, device, None,
                        device_is_string=True, device_from_parameter=True, device_kind_unknown=True,
                        device_given=given)
        block = _scope_block(facts, statement, function)
        return Plan(function, block, device, None, choice_statement=facts.ancestor_in(statement, block),
                    device_is_string=True, device_kind_unknown=device.isidentifier(), device_given=given)
    function = _training_function(facts)
    block = function.body if function is not None else facts.module
    if facts.training_helper_calls or _models_moved_elsewhere(facts):
        # The device is chosen where the training is, or where the model is built and moved
        # (`net = get_network(args)`, on the GPU only when a flag says so), in another module
        # of the project: the group uses each device type's default backend, and this rank's
        # accelerator is made current, so that "cuda" there means this process's own GPU.
        return Plan(function, block, "device", None, device_elsewhere=True)
    cpu_only = not facts.fixed_device_moves and not facts.fixed_device_values and not moves_to_a_gpu_index(facts) \
        and not gpu_made_the_default(facts)
    unfollowed = _moves_to_an_unfollowed_device(facts) if cpu_only else []
    if unfollowed and all(_only_the_cpu(facts, call) for call in unfollowed):
        # `def get_device(): return torch.device("cpu")`: the CPU chosen by name, kept (Gloo).
        return Plan(function, block, "device", None, cpu_only=True)
    if unfollowed:
        # Not the CPU: the models go where `get_device()` says. The group takes each device
        # type's default backend and this rank's accelerator is made current before anything
        # runs, so that "cuda" there means this process's own GPU; what ddpify cannot read
        # is reported (DDP007), unless it is a function of this file that only ever returns
        # "cuda" or "cpu" without an index.
        return Plan(function, block, "device", None, device_elsewhere=True,
                    unfollowed_device_moves=[call for call in unfollowed if not _device_type_only(facts, call)])
    return Plan(function, block, "device", None, cpu_only=cpu_only)


def _caller_of_every_training_function(
        facts: Facts) -> Optional[tuple[Optional[cst.FunctionDef], Union[cst.Module, cst.BaseSuite]]]:
    """Rule: a script trains in stages, each a function that chooses its device, builds its
    model and loaders and trains (`pretrain()` then `finetune()`, `train_teacher()` then
    `train_student()`). One setup block serves them all when a single block calls each of
    them exactly once, as a statement of that block itself (not under an if or a loop):
    the body of `if __name__ == "__main__":`, of a `main()` called once, or the module.
    Its first statement dominates every stage, so the group is joined there once and torn
    down once at its end; the stages' own choices of "cuda" mean this rank's GPU."""
    stages = {model.function for model in facts.models}
    if len(stages) < 2 or None in stages or not facts.device_assignments or any(
            assignment.function not in stages or not _device_type_only_choice(facts, assignment)
            for assignment in facts.device_assignments):
        return None
    if facts.fixed_device_moves or facts.fixed_device_values or moves_to_a_gpu_index(facts):
        return None  # a GPU named by index there: the setup must replace that choice
    blocks = set()
    for stage in stages:
        calls = facts.calls_of(stage)
        if len(calls) != 1:
            return None
        statement = facts.statement_of(calls[0])
        block = facts.parents.get(statement)
        if not isinstance(block, (cst.Module, cst.IndentedBlock)):
            return None
        blocks.add(block)
    if len(blocks) != 1:
        return None
    block = blocks.pop()
    if isinstance(block, cst.Module):
        return None, block
    owner = facts.parents.get(block)
    guard = facts.main_guard
    if guard is not None and owner is guard:
        return None, block
    if isinstance(owner, cst.FunctionDef) and owner not in stages and facts.function_of(owner) is None \
            and not called_repeatedly(facts, owner):
        return owner, block
    return None


def _device_type_only_choice(facts: Facts, assignment: DeviceAssignment) -> bool:
    """`torch.device("cuda" if torch.cuda.is_available() else "cpu")`, `"cuda" if ... else
    "cpu"`: device types only, no GPU index (`"cuda:0"`, `torch.device("cuda", 0)`)."""
    code = facts.module.code_for_node(assignment.statement)
    return (assignment.cuda_or_cpu or assignment.is_string) and "cuda:" not in code \
        and not find_all(assignment.statement, cst.Integer)


def _moves_to_an_unfollowed_device(facts: Facts) -> list[cst.Call]:
    """Rule: a script that chooses no device ddpify knows, but moves a model (or a batch
    where a model is built) with `.to(X)`, X a call of a function (`get_device()`, not a
    torch API), a name assigned from one (`device = get_device()`) or a name or attribute
    that says it is a device, is not CPU-only: its device is one ddpify cannot follow."""
    found = []
    for call in _moves_to_a_named_device(facts):
        argument = call.args[0]
        if argument.keyword is not None and argument.keyword.value != "device":
            continue
        written = dotted_name(argument.value) or ""
        if any(word in written.rsplit(".", 1)[-1].lower() for word in ("dtype", "precision")):
            continue  # `.to(dtype)`: a type, not a device
        if _device_call(facts, argument.value) is not None:
            found.append(call)
            continue
        name = dotted_name(argument.value)
        if name is not None and "device" in name.rsplit(".", 1)[-1].lower():
            found.append(call)
    return found


def _device_call(facts: Facts, value: cst.BaseExpression) -> Optional[cst.Call]:
    """The call of a function that gives this device: the value itself, or the one value
    of the name (`device = get_device()`)."""
    if isinstance(value, cst.Name):
        values = facts.assigned_values.get(value.value, [])
        if len(values) != 1:
            return None
        value = values[0]
    if not isinstance(value, cst.Call):
        return None
    callee = dotted_name(value.func)
    if callee is None or callee.split(".", 1)[0] == "torch":
        return None
    return value


def _returns_and_assignments(definition: cst.FunctionDef
                              ) -> tuple[list[cst.Return], dict[str, list[cst.BaseExpression]]]:
    """The returns of a function, and what it assigns to each plain name (not in nested
    functions)."""
    assigned: dict[str, list[cst.BaseExpression]] = {}

    class Visitor(cst.CSTVisitor):
        def visit_Assign(self, node: cst.Assign) -> None:
            for target in node.targets:
                if isinstance(target.target, cst.Name):
                    assigned.setdefault(target.target.value, []).append(node.value)

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is definition

    traversal.visit(definition, Visitor())
    return returns_in(definition), assigned


def _device_type_only(facts: Facts, move: cst.Call) -> bool:
    """`get_device()` of this file, each of whose returns is "cuda" or "cpu" (a string or a
    torch.device, chosen by a conditional or not), never a GPU index: under the setup "cuda"
    is this rank's own GPU. Also a name of the move's function set only that way, or from a
    parameter that no call of the function gives (`device = device or ("cuda" if ... else
    "cpu")` in `def run(epochs, device=None)`, called as `run()`): its default, None, falls
    through to the choice."""
    if move in facts.moves_to_imported_device_type:
        return True  # `from config import device`, set there to "cuda" or "cpu"
    call = _device_call(facts, move.args[0].value)
    if call is None:
        return _name_set_to_device_type(facts, move)
    definition = _device_function(facts, call)
    if definition is None:
        return False
    returns, assigned = _returns_and_assignments(definition)
    return bool(returns) and all(_type_only(facts, node.value, assigned) for node in returns)


def _device_function(facts: Facts, call: cst.Call) -> Optional[cst.FunctionDef]:
    """The one function of this file a device call names (`get_device()`), if it is one."""
    if not isinstance(call.func, cst.Name):
        return None
    definitions = [statement for statement in facts.module.body
                   if isinstance(statement, cst.FunctionDef) and statement.name.value == call.func.value]
    return definitions[0] if len(definitions) == 1 else None


def _only_the_cpu(facts: Facts, move: cst.Call) -> bool:
    """`.to(get_device())` (or `.to(device)`, `device = get_device()`), `get_device()` a function
    of this file each of whose returns is "cpu" or `torch.device("cpu")`, or a name assigned
    only those: the user chose the CPU, which stays the CPU."""
    call = _device_call(facts, move.args[0].value)
    definition = _device_function(facts, call) if call is not None else None
    if definition is None:
        return False
    returns, assigned = _returns_and_assignments(definition)

    def cpu(value: Optional[cst.BaseExpression], depth: int = 0) -> bool:
        if value is None or depth > 3:
            return False
        if isinstance(value, cst.Call) and dotted_name(value.func) == "torch.device":
            return len(value.args) == 1 and value.args[0].keyword is None and cpu(value.args[0].value, depth)
        if isinstance(value, cst.Name):
            values = assigned.get(value.value, [])
            return bool(values) and all(cpu(each, depth + 1) for each in values)
        return isinstance(value, cst.SimpleString) and value.evaluated_value == "cpu"

    return bool(returns) and all(cpu(node.value) for node in returns)


def _name_set_to_device_type(facts: Facts, move: cst.Call) -> bool:
    value = move.args[0].value
    function = facts.function_of(move)
    if not isinstance(value, cst.Name) or function is None:
        return False
    _, assigned = _returns_and_assignments(function)
    values = assigned.get(value.value, [])
    given = _parameters_given_by_a_call(facts, function)
    if value.value in given:
        return False  # a caller's device, which may name a GPU
    return bool(values) and all(_type_only(facts, each, assigned, ungiven=parameter_names(function) - given,
                                           name=value.value) for each in values)


def _parameters_given_by_a_call(facts: Facts, function: cst.FunctionDef) -> set[str]:
    """The parameters some call of the function passes (all of them where a call passes
    `*args` or `**kwargs`, or where the function is handed on rather than called)."""
    every = parameter_names(function)
    calls = facts.calls_of(function)
    mentions = sum(isinstance(node, cst.Name) and node.value == function.name.value
                   for node in facts.nodes_of(cst.Name))
    if facts.class_of(function) is not None or mentions != len(calls) + 1:  # the def names it once
        return every  # a method, or a function handed on (`Thread(target=run)`): not all its calls are seen
    given: set[str] = set()
    positional = positional_parameters(function)
    for call in calls:
        for index, arg in enumerate(call.args):
            if arg.star:
                return every
            if arg.keyword is not None:
                given.add(arg.keyword.value)
            elif index < len(positional):
                given.add(positional[index])
    return given


def _type_only(facts: Facts, value: Optional[cst.BaseExpression], assigned: dict[str, list[cst.BaseExpression]],
               depth: int = 0, ungiven: AbstractSet[str] = frozenset(), name: str = "") -> bool:
    """"cuda", "mps" or "cpu", never an index: a string, torch.device of one, a conditional between
    them, a name assigned only those, or `name or <one of them>` on a parameter `name` that
    no call gives (None, its default, falls through)."""
    if value is None or depth > 3:
        return False
    if isinstance(value, cst.BooleanOperation) and isinstance(value.operator, cst.Or):
        left = value.left
        return isinstance(left, cst.Name) and left.value == name and name in ungiven and _type_only(
            facts, value.right, assigned, depth, ungiven, name)
    if isinstance(value, cst.IfExp):
        return _type_only(facts, value.body, assigned, depth, ungiven, name) and _type_only(
            facts, value.orelse, assigned, depth, ungiven, name)
    if isinstance(value, cst.Call) and dotted_name(value.func) == "torch.device":
        return len(value.args) == 1 and value.args[0].keyword is None and _type_only(
            facts, value.args[0].value, assigned, depth, ungiven, name)
    if isinstance(value, cst.Name):
        values = assigned.get(value.value, [])
        return bool(values) and all(_type_only(facts, v, assigned, depth + 1) for v in values)
    # "cuda:0" here becomes "cuda" (rules/devices.py): the GPU the setup made current.
    # "mps" too: an Apple GPU's single device, which a CUDA machine never chooses; it has no
    # index that could put every rank on one GPU.
    return isinstance(value, cst.SimpleString) and (
        value.evaluated_value in ("cuda", "cpu", "mps") or value in facts.fixed_gpu_strings)


def _models_moved_elsewhere(facts: Facts) -> bool:
    """Every model is what a function of another module of the project returns after moving
    it to a device, and nothing here moves it again."""
    return bool(facts.models) and all(
        not facts.device_moves.get(model.name) and any(
            value in facts.calls_returning_moved for value in facts.assigned_values.get(model.name, ()))
        for model in facts.models)


def _device_named_elsewhere(facts: Facts) -> Optional[tuple[str, Optional[Statement], Optional[cst.FunctionDef]]]:
    """`model.to(args.device)`: a device the script takes, as a string, from its command line
    or a config object (the expression, the statement that makes that object, its function).
    The setup follows that statement; the string stays the user's. An object the function
    is handed (`def train(cfg): ... model.to(cfg.device)`), a global of the module or an
    imported config (`config.DEVICE`) has no such statement there (None): the setup opens the
    function, or the module after its imports."""
    indices, options = gpu_index_codes(facts), integer_options(facts)
    for call in _moves_to_a_named_device(facts):
        if is_gpu_index(facts, call.args[0].value, indices, options):
            continue  # `x.to(args.gpu)` beside `.cuda(args.gpu)`: a GPU index, not a device
        alias = _name_for_a_config_entry(facts, call.args[0].value)
        if alias is not None:
            # `device = args.device` (or `cfg["device"]`): the setup follows that statement.
            return alias
        parameter = _device_parameter(facts, call)
        if parameter is not None:
            return parameter, None, facts.function_of(call)
        named = _config_entry(facts, call.args[0].value)
        if named is None:
            continue
        device, owner = named
        function = facts.function_of(call)
        made: list[Statement] = [
                statement for statement in facts.statements_touching.get(owner, ())
                if facts.function_of(statement) is function and facts.start_of(statement) < facts.start_of(call)
                and isinstance(statement, cst.SimpleStatementLine) and any(
                    isinstance(small, cst.Assign) and any(dotted_name(t.target) == owner for t in small.targets)
                    for small in statement.body)]
        # `cfg["device"] = "cuda"` (or `args.device = ...`) after the object is made: the
        # setup reads the entry, so it follows the last statement that sets it.
        made += [facts.statement_of(assign) for assign in facts.own_statements(function, cst.Assign)
                 if facts.start_of(assign) < facts.start_of(call)
                 and any(facts.module.code_for_node(t.target) == device for t in assign.targets)]
        made.sort(key=facts.start_of)
        if made:
            return device, made[-1], function
        # Not set in the move's scope before it: known when that scope starts (a parameter, a
        # global the module sets such as `args = parser.parse_args()`, an imported config).
        if not any(facts.function_of(statement) is function and facts.start_of(statement) < facts.start_of(call)
                   for statement in facts.statements_touching.get(owner, ())):
            return device, None, function
    return None


def _read_from_a_module(facts: Facts, device: Union[str, Statement]) -> bool:
    """`config.DEVICE` of an imported settings module (or `device = config.DEVICE`): a
    device the code there chose, not one given at run time that may name one GPU."""
    if isinstance(device, str):
        root = device.split(".", 1)[0].split("[", 1)[0]
    else:
        values = [small.value for small in getattr(device, "body", ()) if isinstance(small, cst.Assign)]
        read = dotted_name(values[0]) if len(values) == 1 else None
        if read is None:
            return False
        root = read.split(".", 1)[0]
    for alias in facts.nodes_of(cst.ImportAlias):
        bound: cst.BaseExpression = alias.asname.name if alias.asname is not None else alias.name
        while isinstance(bound, cst.Attribute) and isinstance(facts.parents.get(alias), cst.Import):
            bound = bound.value  # `import a.b` binds `a`
        if isinstance(bound, cst.Name) and bound.value == root:
            return True
    return False


def _device_parameter(facts: Facts, move: cst.Call) -> Optional[str]:
    """Rule: `def train(args, device): ... model.to(device)`, the device a parameter of the
    function that moves the model, is the device given at run time, as `args.device` is: the
    caller may hand in one GPU (`torch.device(f"cuda:{args.gpu}")`, `args.device` from
    `--device cuda:1`). The setup opens the function and makes it this rank's own. A
    parameter counts when its name says device or a caller hands it a device (a
    torch.device, a "cuda..." or "cpu" string or f-string, a name that says device); not when
    the function assigns it before the move."""
    value = move.args[0].value
    function = facts.function_of(move)
    if not isinstance(value, cst.Name) or function is None or value.value not in parameter_names(function):
        return None
    touching = facts.statements_touching.get(value.value, ())
    if any(facts.function_of(statement) is function and facts.start_of(statement) < facts.start_of(move)
           and value.value in assigned_names(statement) for statement in touching):
        return None
    if "device" in value.value.lower():
        return value.value
    for call in facts.calls_of(function):
        handed = handed_for(call, function, value.value)
        if handed is not None and _names_a_device(facts, handed):
            return value.value
    # `Trainer(model, loader, device)`: what the class's constructions hand its __init__.
    owner = facts.class_of(function) if function.name.value == "__init__" else None
    if owner is not None:
        for call in facts.calls_by_callee.get(owner.name.value, ()):
            handed = argument_among(call, value.value, positional_parameters(function)[1:])
            if handed is not None and _names_a_device(facts, handed):
                return value.value
    return None


def _names_a_device(facts: Facts, value: cst.BaseExpression) -> bool:
    if isinstance(value, cst.IfExp):
        return _names_a_device(facts, value.body) or _names_a_device(facts, value.orelse)
    if isinstance(value, cst.Call):
        return value in facts.calls_named.get(names.TORCH_DEVICE, ())
    if isinstance(value, (cst.SimpleString, cst.FormattedString)):
        text = facts.module.code_for_node(value).lstrip("rbfuRBFU").strip("\"'")
        return text.startswith(("cuda", "cpu"))
    name = dotted_name(value)
    return name is not None and "device" in name.rsplit(".", 1)[-1].lower()


def gpu_index_codes(facts: Facts) -> set[str]:
    """The code of what `.cuda(X)` or `torch.cuda.set_device(X)` is handed (`args.gpu`): a GPU
    index, so that `.to(X)`, `device=X` and `f"cuda:{X}"` name that same fixed GPU."""
    codes = {facts.module.code_for_node(call.args[0].value) for call in facts.fixed_device_moves
             if isinstance(call.func, cst.Attribute) and call.func.attr.value == "cuda"
             and call.args and call.args[0].keyword is None}
    for statement in facts.set_device_statements:
        for call in calls_within(statement):
            if dotted_name(call.func) in ("torch.cuda.set_device", "cuda.set_device") and call.args \
                    and not isinstance(call.args[0].value, cst.Integer):
                codes.add(facts.module.code_for_node(call.args[0].value))
    return codes | _names_bound_to_an_index(facts)


def _names_bound_to_an_index(facts: Facts) -> set[str]:
    """Rule (follow device values): `gpu = 0` (or `GPU_ID = 1`), then `model.to(gpu)`: a name
    whose every assignment in the file is an integer literal, handed to `.to()`, is a GPU
    index as surely as `.to(0)` is, and names that one GPU on every rank. Not a name any
    function takes as a parameter (a caller may hand it anything there)."""
    handed = {arg.value.value for call in facts.nodes_of(cst.Call)
              if isinstance(call.func, cst.Attribute) and call.func.attr.value == "to"
              for arg in call.args[:1] if arg.keyword is None and isinstance(arg.value, cst.Name)}
    if not handed:
        return set()
    parameters = {name for function in facts.nodes_of(cst.FunctionDef) for name in parameter_names(function)}
    return {name for name in handed - parameters
            if facts.assigned_values.get(name)
            and all(isinstance(value, cst.Integer) for value in facts.assigned_values[name])}


def integer_options(facts: Facts) -> set[str]:
    """The attributes that `parser.add_argument("--gpu", type=int)` (or an integer default
    and no type) gives the parsed arguments: numbers, so one handed as a device
    (`.to(args.gpu)`) is a GPU index, never a device string."""
    found = set()
    for callee, calls in facts.calls_by_callee.items():
        if not callee.endswith(".add_argument"):
            continue
        for call in calls:
            keywords = {arg.keyword.value: arg.value for arg in call.args if arg.keyword is not None}
            kind = keywords.get("type")
            default = keywords.get("default")
            if not (isinstance(kind, cst.Name) and kind.value == "int" or kind is None
                    and "action" not in keywords and isinstance(default, cst.Integer)):
                continue
            given = keywords.get("dest")
            flags = [str(arg.value.evaluated_value) for arg in call.args
                     if arg.keyword is None and isinstance(arg.value, cst.SimpleString)]
            if isinstance(given, cst.SimpleString):
                found.add(str(given.evaluated_value))
            elif flags:
                long = [flag for flag in flags if flag.startswith("--")]
                found.add((long or flags)[0].lstrip("-").replace("-", "_"))
    return found


def is_gpu_index(facts: Facts, value: cst.BaseExpression, indices: AbstractSet[str],
                 options: AbstractSet[str]) -> bool:
    """Rule: a value handed as a device that is a GPU index of the script (what `.cuda(X)` or
    set_device is handed, or an integer command-line option such as `args.gpu`): it names
    one GPU for every rank. (`indices` and `options`: gpu_index_codes and integer_options.)"""
    if facts.module.code_for_node(value) in indices:
        return True
    return isinstance(value, cst.Attribute) and isinstance(value.value, cst.Name) \
        and value.value.value != "self" and value.attr.value in options


def moves_to_a_gpu_index(facts: Facts) -> list[cst.Call]:
    """`.to(X)` where X is a GPU index (is_gpu_index)."""
    indices, options = gpu_index_codes(facts), integer_options(facts)
    if not indices and not options:
        return []
    fixed = set(facts.fixed_device_moves)
    return [call for call in facts.nodes_of(cst.Call)
            if call not in fixed and isinstance(call.func, cst.Attribute) and call.func.attr.value == "to"
            and call.args and call.args[0].keyword is None
            and is_gpu_index(facts, call.args[0].value, indices, options)]


def _name_for_a_config_entry(facts: Facts, value: cst.BaseExpression
                             ) -> Optional[tuple[str, Optional[Statement], Optional[cst.FunctionDef]]]:
    """`device` where the script once set `device = cfg.device`: the name, that statement and
    its function."""
    if not isinstance(value, cst.Name):
        return None
    values = facts.assigned_values.get(value.value, [])
    if len(values) != 1 or _config_entry(facts, values[0]) is None:
        return None
    statement = facts.statement_of(values[0])
    if not isinstance(statement, cst.SimpleStatementLine):
        return None
    return value.value, statement, facts.function_of(statement)


def _config_entry(facts: Facts, value: cst.BaseExpression) -> Optional[tuple[str, str]]:
    """The code of a device read from a config object, and the object's name: `args.device`,
    `cfg.train.device`, `cfg["device"]` (not `self.device`, which a class sets)."""
    key = value
    while isinstance(key, cst.Subscript) and len(key.slice) == 1 and isinstance(key.slice[0].slice, cst.Index) \
            and isinstance(key.slice[0].slice.value, cst.SimpleString):
        key = key.value
    name = dotted_name(key)
    if name is None or (key is value and "." not in name) or name.split(".", 1)[0] == "self":
        return None
    return facts.module.code_for_node(value), name.split(".", 1)[0]


def _moves_to_a_named_device(facts: Facts) -> list[cst.Call]:
    """`.to(...)` calls that move a model (`model.to(...)`, or `Net().to(...)` where it is
    built), then those that move anything else where a model is built (a batch:
    `x.to(cfg.device)`)."""
    models = {model.name for model in facts.models}
    functions = {model.function for model in facts.models}
    built = [value for name in models for value in facts.assigned_values.get(name, ())]
    moves = [call for name in models for call in facts.device_moves.get(name, ())]
    moves += [value for value in built if isinstance(value, cst.Call)]
    moves += [call for name, calls in facts.device_moves.items() if name not in models for call in calls
              if facts.function_of(call) in functions]
    # `modules[name] = modules[name].to(device)` before `net = modules["net"]`.
    moves += [call for model in facts.models for call in container_moves(facts, model)]
    return [call for call in moves if call.args and isinstance(call.func, cst.Attribute)
            and call.func.attr.value == "to"]


def _device_choice(facts: Facts) -> list[DeviceAssignment]:
    """The assignments of one device variable in one scope: in the function that trains
    if it chooses a device, else the first one chosen."""
    groups: dict = {}
    for assignment in facts.device_assignments:
        groups.setdefault((assignment.function, assignment.name), []).append(assignment)
    training = {model.function for model in facts.models} | {_training_function(facts)}
    for (function, _), assignments in groups.items():
        if function in training:
            return assignments
    return next(iter(groups.values()), [])


def _scope_block(facts: Facts, statement: cst.BaseStatement,
                 function: Optional[cst.FunctionDef]) -> Union[cst.Module, cst.BaseSuite]:
    if function is not None:
        return function.body
    guard = facts.main_guard
    if guard is not None and facts.ancestor_in(statement, guard.body) is not None:
        return guard.body
    return facts.module


def read_from_the_scope_around(facts: Facts, model: Model) -> bool:
    """The model an optimizer trains in a function is a name the function never binds (not a
    parameter, not assigned there) nor moves, which the scope around it (the module, or an
    enclosing function) assigns: `def train(epoch): optimizer = SGD(net.parameters(), ...)`
    over the module's `net`. The model is that scope's."""
    function = model.function
    if function is None or "." in model.name or model.name in names_bound_in(function) or any(
            facts.function_of(move) is function for move in facts.device_moves.get(model.name, ())):
        return False  # (a function that moves it too: where it reaches its device is there)
    outer = facts.function_of(function)
    return any(facts.function_of(statement) is outer and model.name in assigned_names(statement)
               for statement in facts.statements_touching.get(model.name, ()))


def where_the_read_model_moves(facts: Facts, model: Model) -> Optional[cst.FunctionDef]:
    """For a model read_from_the_scope_around: `def main(): if use_cuda: net.cuda(); for epoch
    ...: train(epoch)`, where `train(epoch)` builds its optimizer over the module's `net`. The
    one function beside `train()` that moves the model and calls `train()`: the model reaches
    its device there, so its wrap (and the setup before it) goes there, not where it is built.
    None when the model moves elsewhere too, or nowhere but in the scope around."""
    function = cast(cst.FunctionDef, model.function)
    outer = facts.function_of(function)
    movers = {facts.function_of(move) for move in facts.device_moves.get(model.name, ())}
    if len(movers) != 1:
        return None
    mover = next(iter(movers))
    if mover is None or mover is function or facts.function_of(mover) is not outer or not any(
            facts.function_of(call) is mover for call in facts.calls_of(function)):
        return None
    return mover


def _training_function(facts: Facts) -> Optional[cst.FunctionDef]:
    """The function the setup goes into: where the training loop runs, or the function that
    calls it and builds the model (`main()` calling `train(...)` once per epoch), so that
    the group exists before the model is wrapped."""
    model_function = facts.models[0].function if facts.models else None
    if facts.models and read_from_the_scope_around(facts, facts.models[0]):
        # `def train(epoch)` builds its optimizer over the module's `net` on every call: the
        # model is the module's, built and moved there, and wrapped there.
        model_function = where_the_read_model_moves(facts, facts.models[0]) or facts.function_of(
            cast(cst.FunctionDef, model_function))
    # A flat script: the model is built at module level and `def train(epoch)` loops over a
    # module-level loader. The setup goes at module level too, where the model's wrap and
    # the loaders can see it, not into train().
    flat = bool(facts.models) and model_function is None
    for loader in facts.loaders:
        # A loop that trains first: an `eval(dataloader, model)` whose parameter has the
        # training loader's name iterates something else.
        for loop in sorted(facts.loops_over.get(loader.name, ()), key=lambda loop: not facts.loop_trains(loop)):
            function = facts.function_of(loop)
            if flat and function is not None and facts.calls_of(function) and all(
                    facts.function_of(call) is None for call in facts.calls_of(function)):
                return None
            if model_function is not None and function is not None and any(
                    facts.function_of(call) is model_function for call in facts.calls_of(function)):
                return model_function
            return function
    if facts.models:
        # `self.build_model()`, then `if self.use_cuda: self.G.cuda()`: the wrap follows the
        # move in the caller, and the setup goes there, before the call, where the caller's
        # own test (`self.use_cuda`) is in sight.
        return caller_moving_after_the_build(facts, facts.models[0]) or _caller_handing_in(
            facts, facts.models[0]) or facts.models[0].function
    if facts.training_helper_calls:
        return facts.function_of(facts.training_helper_calls[0])
    return None


def _caller_handing_in(facts: Facts, model: Model) -> Optional[cst.FunctionDef]:
    """Rule: `def fetch_optimizer(args, model): return AdamW(model.parameters(), ...)`, called
    once, from `train()`, which builds the model: the optimizer's function is handed the model
    and is no place for the setup (the group would be joined after the model is wrapped in the
    caller). The setup goes into the one function that calls it, where the model is built."""
    function = model.function
    if function is None or model.name not in parameter_names(function) or facts.class_of(function) is not None:
        return None
    calls = facts.calls_of(function)
    caller = facts.function_of(calls[0]) if len(calls) == 1 else None
    return caller if caller is not None and not facts.enclosing_loops(calls[0]) else None


def _for_this_script(code: str, facts: Facts, plan: Plan) -> str:
    """A setup template as this script needs it.

    Module-level setup in a file with a `__main__` guard: importing the module (to reuse
    its model class) stays single-process, as it was; only running it joins the group.
    Models that all stay on the CPU: Gloo, since NCCL cannot all-reduce CPU gradients. A
    function that runs more than once: the group is created on its first call only."""
    if plan.function is None and plan.block is facts.module and facts.main_guard is not None:
        code = code.replace('distributed = "WORLD_SIZE" in os.environ\n', RUN_NOT_IMPORTED, 1)
    on_cpu = not plan.cpu_only and 0 < plan.wrapped_models == plan.models_on_cpu
    lines = []
    for line in code.splitlines(keepends=True):
        if "dist.init_process_group(" in line:
            indent = line[: len(line) - len(line.lstrip())]
            if on_cpu:
                line = f'{indent}dist.init_process_group("gloo")  # the model stays on the CPU\n'
            if plan.called_repeatedly:
                lines.append(f"{indent}if not dist.is_initialized():  # the first call sets it up\n")
                line = "    " + line
            elif plan.early_joins:
                lines.append(f"{indent}if not dist.is_initialized():  # not joined before the loaders\n")
                line = "    " + line
        lines.append(line)
    return "".join(lines)


def called_repeatedly(facts: Facts, function: Optional[cst.FunctionDef]) -> bool:
    """Whether the setup's function may run more than once. A class's `__init__` runs once
    per instance: each `Trainer(...)` counts, one in a loop counts many, and a class this
    file never builds (a factory, another module) may be built any number of times."""
    owner = facts.class_of(function)
    if owner is not None and function is not None and function.name.value == "__init__":
        calls = facts.calls_by_callee.get(owner.name.value, [])
        return len(calls) != 1 or any(facts.enclosing_loops(call) for call in calls)
    if _called_from_other_modules(facts, function):
        return True
    calls = facts.calls_of(function)
    return len(calls) > 1 or any(facts.enclosing_loops(call) for call in calls)


def _called_from_other_modules(facts: Facts, function: Optional[cst.FunctionDef]) -> bool:
    """A top-level function that another module of the project imports (`from linear_eval
    import main as linear_eval`, called after that script's training): it may run after
    the caller's own setup has joined the group, where a second init_process_group raises."""
    return function is not None and facts.class_of(function) is None and facts.function_of(
        function) is None and function.name.value in facts.used_elsewhere


def calls_running(facts: Facts, function: cst.FunctionDef) -> list[cst.Call]:
    """The calls that run a function: `Trainer(...)` for `Trainer.__init__`."""
    owner = facts.class_of(function)
    if owner is not None and function.name.value == "__init__":
        return list(facts.calls_by_callee.get(owner.name.value, ()))
    return facts.calls_of(function)


def group_joined_before(facts: Facts, plan: Plan, node: cst.CSTNode) -> bool:
    """Whether the setup's function has run wherever `node` runs, so that a condition on
    `dist.is_initialized()` there is true under torchrun. Rule: an inserted condition must be
    true where it is placed; the setup dominates a node only when a call that reaches the
    setup comes first in the node's scope, or in that of every caller of the node's function.
    A function this file never calls is taken to run after the setup (a helper of it)."""
    setup_function = plan.function
    if setup_function is None:
        return True
    reaching = {setup_function}
    calls: list[cst.Call] = []
    pending = [setup_function]
    while pending:
        for call in calls_running(facts, pending.pop()):
            calls.append(call)
            caller = facts.function_of(call)
            if caller is not None and caller not in reaching:
                reaching.add(caller)
                pending.append(caller)

    def joined(node: cst.CSTNode, seen: frozenset) -> bool:
        function = facts.function_of(node)
        if function is setup_function:
            return True
        start = facts.start_of(node)
        if any(facts.function_of(call) is function and facts.start_of(call) < start for call in calls):
            return True
        if function is None or function in seen:
            return False
        sites = calls_running(facts, function)
        return all(joined(site, seen | {function}) for site in sites)

    return joined(node, frozenset())


def _report_repeated(edits: Edits, facts: Facts, function: cst.FunctionDef) -> None:
    owner = facts.class_of(function)
    if owner is not None and function.name.value == "__init__":
        edits.report("DDP009", function, f"setup in {owner.name.value}.__init__, which may run once per "
                                          f"{owner.name.value}(...): the group is created once")
    elif _called_from_other_modules(facts, function):
        edits.report("DDP009", function, f"setup in {function.name.value}(), which another module of the "
                                          "project also calls, maybe after its own setup: the group is "
                                          "created once")
    else:
        edits.report("DDP009", function)


def _report_devices_ddpify_cannot_follow(facts: Facts, edits: Edits, plan: Plan) -> None:
    """DDP007 once for each device a move names that the setup cannot make this rank's own."""
    reported = set()
    for call in facts.moves_to_imported_fixed_gpu:
        where = facts.module.code_for_node(call.args[0].value)
        if where in reported:
            continue
        reported.add(where)
        edits.report("DDP007", call, f"`{where}` names a fixed GPU (\"cuda:0\") in another module: every rank "
                                     f"would use that GPU; make it \"cuda\" there, the GPU the setup makes "
                                     f"this rank's own")
    for call in plan.unfollowed_device_moves:
        source = _device_call(facts, call.args[0].value) or call.args[0].value
        where = facts.module.code_for_node(source)
        if where in reported:
            continue  # once for each device: the model's move comes first
        reported.add(where)
        edits.report("DDP007", call, f"device `{where}` is one ddpify cannot follow: the setup makes \"cuda\" this "
                                     f"rank's GPU, but a fixed index (\"cuda:0\") puts every rank on that GPU; "
                                     f"make it torch.device(\"cuda\", local_rank) or \"cuda\"")


def place(facts: Facts, edits: Edits, plan: Plan) -> None:
    """Insert the setup block before the first statement of its block that needs it."""
    edits.imports.update({"os", "dist"})
    plan.called_repeatedly = called_repeatedly(facts, plan.function)
    if plan.called_repeatedly and plan.function is not None:  # only a function runs repeatedly
        _report_repeated(edits, facts, plan.function)
    _join_early(facts, edits, plan)
    _report_default_gpu_before_shuffled_samplers(facts, edits)
    _report_devices_ddpify_cannot_follow(facts, edits, plan)
    _keep_a_choice_whose_test_comes_later(facts, edits, plan)
    if plan.choice_statement is not None:
        _place_after_choice(facts, edits, plan)
        return
    anchor = _after_torch_import(facts, plan, _first_statement_needing_setup(facts, edits, plan))
    if plan.cpu_only and anchor is not None:
        edits.report("DDP011", anchor)
    _follow_the_moves_test(facts, edits, plan, anchor)
    setup_code = _keeping_the_scripts_gpu(facts, plan, anchor, _setup_code(edits, plan))
    setup = edits.statements(_for_this_script(setup_code, facts, plan))
    comment = cst.EmptyLine(comment=cst.Comment(SETUP_COMMENT))
    if plan.device_elsewhere:
        # Before anything of the project runs: a module there may choose "cuda" and move a
        # model to it, which must already mean this rank's GPU.
        anchor = _after_torch_import(facts, plan, _first_code_statement(list(plan.block.body)))
    elif plan.device_from_parameter:
        # The device is known from the function's first line: the setup opens it (after its
        # docstring), before anything there moves a tensor.
        anchor = _first_code_statement([statement for statement in plan.block.body
                                        if not _is_docstring(statement)])
    assignment = plan.device_assignment
    if assignment is not None and anchor is assignment.statement:
        lines = list(assignment.statement.leading_lines) + [comment]
        setup[0] = setup[0].with_changes(leading_lines=lines)
        edits.replace(anchor, setup)
        edits.report("DDP001", anchor)
        return
    if assignment is not None:
        edits.removed.add(assignment.statement)
    setup[0] = setup[0].with_changes(leading_lines=[comment])
    if anchor is None:
        edits.module_end.extend(setup)
        return
    edits.insert_before(anchor, Insertion(setup, takes_blank_lines=True), first=True)
    edits.report("DDP001", anchor)


def _keep_a_choice_whose_test_comes_later(facts: Facts, edits: Edits, plan: Plan) -> None:
    """The setup would take the device choice's place above it (a loader needs it first),
    but the choice's test reads a name set in between (`n_gpu` in `"cuda:0" if n_gpu > 0
    else "cpu"`), which would not exist there yet: the choice stays where it is, and the
    setup follows it (the group joined early, the device refined to this rank's)."""
    assignment = plan.device_assignment
    if plan.choice_statement is not None or assignment is None:
        return
    if not _reads_only_names_bound_before(facts, plan, _first_statement_needing_setup(facts, edits, plan),
                                          assignment.gpu_condition or "True"):
        plan.choice_statement = facts.ancestor_in(assignment.statement, plan.block)
        plan.device_assignment = None


def _follow_the_moves_test(facts: Facts, edits: Edits, plan: Plan, anchor: Optional[BlockItem]) -> None:
    """No device is chosen by name, and every model reaches the GPU only under the script's
    own test (`if opt.cuda: netG.cuda()`, a `--cuda` flag): the setup's GPU test is that
    test, so that without the flag the model stays on the CPU and so do the rank's device, the
    wrap (no device_ids) and the backend (Gloo), as in the original. torch.cuda.is_available()
    there would wrap a CPU model with device_ids on a GPU machine, which DDP refuses. Where
    the moves sit under several tests (`if args.gpu >= 0: model.cuda(args.gpu)` / `elif
    args.data_parallel: model = nn.DataParallel(model).cuda()`), the model reaches the GPU
    when any of them holds: the setup's test is their disjunction (an `elif`'s implicit `not`
    of the tests above it changes nothing in an `or` of them all). Where a test reads a name
    set only after the setup must run, it cannot be followed (DDP007)."""
    if plan.device_assignment is not None or plan.device_elsewhere or plan.device_from_parameter or plan.cpu_only:
        return
    tests: dict[str, cst.BaseExpression] = {}
    to_an_index = set(moves_to_a_gpu_index(facts))
    for model in facts.models:
        # (`for net in self.nets.values(): net.cuda()` moves `self.G` of `self.nets = {"G": self.G}`.)
        held = entry_moves_of_containers_holding(facts, model, facts.class_of(model.function))
        # (`net.to(opt.gpu_ids[0])`, a GPU index, moves to the GPU as `.cuda()` does.)
        moves = [move for move in [*facts.device_moves.get(model.name, ()), *held]
                 if move in facts.fixed_device_moves or move in to_an_index]
        # (`if args.cuda: torch.set_default_tensor_type("torch.cuda.FloatTensor")` moves them all.)
        for move in moves + _calls_of_helpers_moving(facts, model.name, model.function) + gpu_made_the_default(facts):
            test = _test_around(facts, move)
            if test is None:
                return  # moved to the GPU whatever the script's flags say
            tests.setdefault(facts.module.code_for_node(test), test)
    if not tests or any(_only_asks_for_cuda(facts, test) for test in tests.values()):
        return  # the setup's own test already (a GPU path that needs no more than a GPU)
    for code, test in tests.items():
        if _reads_names_of_another_function(facts, plan, test):
            edits.report("DDP007", test, f"the models go to the GPU only when `{code}`, which reads names of "
                         "the function that moves them, not where the distributed setup must run: the setup "
                         f"cannot follow it; set `{code}` where the setup can read it, or choose the device by name")
            return
        if not _reads_only_names_bound_before(facts, plan, anchor, code):
            edits.report("DDP007", test, f"the models go to the GPU only when `{code}`, which is set after "
                         "the point where the distributed setup must run: the setup takes the GPU whenever "
                         f"there is one; set `{code}` earlier, or choose the device by name")
            return
    if len(tests) == 1:
        code, test = tests.popitem()
    else:
        code = " or ".join(_operand_of_or(facts, test) for test in tests.values())
        test = cst.parse_expression(code)
    if dotted_name(test) is None:
        name = facts.free_name("use_cuda")
        plan.gpu_condition_code = f"{name} = {code}\n"
        code = name
    plan.use_gpu = code


def _calls_of_helpers_moving(facts: Facts, name: str, function: Optional[cst.FunctionDef]) -> list[cst.Call]:
    """`if args.cuda: to_gpu(model)`, where `to_gpu`, a function of this file, moves the
    parameter it is handed to the GPU whatever it is handed (`module.cuda()`, under no test
    of its own): the call is where the model reaches the GPU, and the test around it is the
    script's GPU test."""
    found = []
    for callee, parameter, call in facts._calls_passing(name, function):
        inner = [move for move in facts.device_moves.get(parameter, ())
                 if facts.function_of(move) is callee and move in facts.fixed_device_moves]
        if inner and all(_test_around(facts, move) is None for move in inner):
            found.append(call)
    return found


def _operand_of_or(facts: Facts, test: cst.BaseExpression) -> str:
    """The test's code as one operand of `a or b`: parenthesized where a lower-precedence
    expression (`x if c else y`, a lambda) would otherwise change what the `or` joins."""
    code = facts.module.code_for_node(test)
    if isinstance(test, (cst.IfExp, cst.Lambda, cst.NamedExpr)) or isinstance(test, cst.BooleanOperation) \
            and isinstance(test.operator, cst.Or):
        return f"({code})"
    return code


def _only_asks_for_cuda(facts: Facts, test: cst.BaseExpression, depth: int = 0) -> bool:
    """`torch.cuda.is_available()`, or a name only ever given that (`cuda = True if
    torch.cuda.is_available() else False`): the test the setup makes itself."""
    available = facts.calls_named.get(names.CUDA_IS_AVAILABLE, ())
    if any(call in available for call in find_all(test, cst.Call)):
        return names_in(test) <= {"torch", "True", "False"}
    values = facts.assigned_values.get(test.value, []) if isinstance(test, cst.Name) else []
    return depth < 2 and bool(values) and all(_only_asks_for_cuda(facts, value, depth + 1) for value in values)


def _test_around(facts: Facts, node: cst.CSTNode) -> Optional[cst.BaseExpression]:
    """The test of the innermost `if` whose body (not its else) holds node, in its function;
    also of a conditional expression (`model.cuda() if args.cuda else model`)."""
    child, parent = node, facts.parents.get(node)
    while parent is not None and not isinstance(parent, (cst.FunctionDef, cst.ClassDef)):
        if isinstance(parent, (cst.If, cst.IfExp)) and child is parent.body:
            return parent.test
        child, parent = parent, facts.parents.get(parent)
    return None


def _reads_names_of_another_function(facts: Facts, plan: Plan, test: cst.BaseExpression) -> bool:
    """Rule: `def enable_gpu(self, wanted): if wanted: self.net.cuda()`, with the setup in
    another function (where the loader is, `train()`): the test reads a parameter or a local
    name of the method that moves, which does not exist where the setup goes."""
    function = facts.function_of(test)
    if function is None or function is plan.function:
        return False
    local = set(parameter_names(function)) | {
        name for statement in facts.own_statements(function, cst.Assign)
        for target in statement.targets for name in target_names(target.target)}
    return bool(names_in(test) & local)


def _reads_only_names_bound_before(facts: Facts, plan: Plan, anchor: Optional[BlockItem], code: str) -> bool:
    """Whether every name `code` reads that the setup's block binds is bound by a statement
    above `anchor` (where the setup goes): a name the block binds only from there on would
    not exist yet. Names the block never binds (parameters, globals, imports) are there."""
    body: list[BlockItem] = list(plan.block.body)
    if anchor is None or anchor not in body:
        return True
    cut = body.index(anchor)

    def bound(statements: Sequence[BlockItem]) -> set[str]:
        return {name for statement in statements for target in targets_bound_in(statement)
                for name in target_names(target)}

    later = bound(body[cut:]) - bound(body[:cut])
    return not names_in(cst.parse_expression(code)) & later


SCRIPT_GPU_CODE = """\
if not distributed and isinstance({index}, int) and {index} >= 0:
    local_rank = {index}  # plain `python` keeps the script's own GPU
"""


# `opt.gpu_ids[0]` of a list that is empty on the CPU (`--gpu_ids -1`).
SCRIPT_GPU_OF_A_LIST_CODE = """\
if not distributed and {ids} and isinstance({ids}[0], int) and {ids}[0] >= 0:
    local_rank = {ids}[0]  # plain `python` keeps the script's own GPU
"""


def _keeping_the_scripts_gpu(facts: Facts, plan: Plan, anchor: Optional[BlockItem], code: str) -> str:
    """Rule: a script that names its GPU by an index it is given (`--gpu 1`: `torch.cuda.
    set_device(args.gpu)`, `.cuda(args.gpu)`, `.to(opt.gpu_id)`) trains on that GPU under plain
    `python`; the setup block replaces those with this rank's device, LOCAL_RANK under torchrun,
    and keeps the script's index as a group of one (DESIGN §2.2: plain `python` reproduces the
    original). Only for one index, readable where the setup goes; an index that is not a
    non-negative int there (None: DataParallel on every GPU; -1: the CPU) leaves GPU 0, as the
    original's bare `.cuda()` took it. (A device the script keeps, or no GPU: nothing to keep.)"""
    if plan.device_elsewhere or plan.device_from_parameter or plan.cpu_only:
        return code
    index = _the_scripts_gpu_index(facts, plan, anchor)
    if index is None:
        return code
    line = 'local_rank = int(os.environ.get("LOCAL_RANK", 0))\n'
    ids = index.removesuffix("[0]")
    keep = SCRIPT_GPU_OF_A_LIST_CODE.format(ids=ids) if ids != index else SCRIPT_GPU_CODE.format(index=index)
    return code.replace(line, line + keep, 1)


def _the_scripts_gpu_index(facts: Facts, plan: Plan, anchor: Optional[BlockItem]) -> Optional[str]:
    """The one GPU index the script is given and names its GPU by (a name or an attribute:
    `args.gpu`, `opt.gpu_id`, `GPU`, or the first of a list of them, `opt.gpu_ids[0]`; not a
    literal), if the setup can read it where it goes."""
    codes = {code for code in gpu_index_codes(facts) if _names_an_index(cst.parse_expression(code))}
    codes |= {facts.module.code_for_node(call.args[0].value) for call in moves_to_a_gpu_index(facts)
              if _names_an_index(call.args[0].value)}
    if len(codes) != 1:
        return None
    code = codes.pop()
    if "rank" in code.lower() or not _readable_at_the_setup(facts, plan, anchor, code.removesuffix("[0]")):
        return None
    values = facts.assigned_values.get(code, [])
    if values and all(isinstance(value, cst.Integer) and value.evaluated_value == 0 for value in values):
        return None  # `gpu = 0`: GPU 0, LOCAL_RANK's own default
    return code


def _names_an_index(value: cst.BaseExpression) -> bool:
    """A dotted name (`args.gpu`), or the first entry of one (`opt.gpu_ids[0]`)."""
    if isinstance(value, cst.Subscript) and len(value.slice) == 1 and isinstance(value.slice[0].slice, cst.Index):
        entry = value.slice[0].slice.value
        return isinstance(entry, cst.Integer) and entry.value == "0" and dotted_name(value.value) is not None
    return dotted_name(value) is not None


def _readable_at_the_setup(facts: Facts, plan: Plan, anchor: Optional[BlockItem], code: str) -> bool:
    """Whether `code` (a dotted name) exists where the setup goes: its root is a parameter of
    the setup's function, bound above the setup in its block, or a module-level name the
    function does not rebind; and nothing from there on assigns the value itself."""
    root = code.split(".", 1)[0]
    body: list[BlockItem] = list(plan.block.body)
    cut = body.index(anchor) if anchor is not None and anchor in body else len(body)

    def bound(statements: Iterable[cst.CSTNode]) -> set[str]:
        return {name for statement in statements for target in targets_bound_in(statement)
                for name in target_names(target)}

    later_targets = {facts.module.code_for_node(target) for statement in body[cut:]
                     for target in targets_bound_in(statement)}
    if code in later_targets:
        return False
    if root in bound(body[:cut]):
        return True
    function = plan.function
    if function is None:
        return False
    if root in parameter_names(function):
        return True
    module_level = [statement for statement in facts.module.body
                    if not isinstance(statement, (cst.FunctionDef, cst.ClassDef))]
    return root in bound(module_level) and root not in bound([function.body])


def _setup_code(edits: Edits, plan: Plan) -> str:
    """The setup block of a plan without a device choice statement to follow."""
    if plan.device_elsewhere:
        edits.imports.add("torch")
        code = ENVIRONMENT_CODE + EARLY_GROUP_CODE
    elif plan.device_from_parameter:
        edits.imports.add("torch")
        refine = REFINE_ANY_GIVEN_CODE if plan.device_given else REFINE_ANY_CODE
        code = ENVIRONMENT_CODE + refine.format(device=plan.device)
    elif plan.cpu_only:
        code = ENVIRONMENT_CODE + CPU_ONLY_CODE
    else:
        setup_code = fsdp2.bound_to_device(SETUP_CODE) if edits.options.fsdp2 else SETUP_CODE
        code = plan.gpu_condition_code + setup_code.format(
            device=plan.device, use_gpu=plan.use_gpu, rank_device=RANK_INDEX if plan.device_is_index else RANK_DEVICE)
    if plan.needs_world_size:
        first_line, rest = code.split("\n", 1)
        code = first_line + "\n" + WORLD_SIZE_CODE + rest
    if "is_main" in plan.guards_used:
        code += IS_MAIN_CODE
    return code


def _join_early(facts: Facts, edits: Edits, plan: Plan) -> None:
    """Above the first loader of each block that is sharded before the setup has run, or
    above an earlier device move in that block after which a model is wrapped out of the
    setup's sight (`if dist.is_initialized(): self.net = DDP(self.net)`, which a group
    joined only at the loader would never see, leaving the model unwrapped on every rank;
    joined above the move, the device index is set before `.cuda()` too)."""
    firsts: dict = {}
    for statement in plan.early_joins:
        block = facts.block_of(statement)
        if block not in firsts or facts.start_of(statement) < facts.start_of(firsts[block]):
            firsts[block] = statement
    for block, first in list(firsts.items()):
        for anchor in plan.wrap_points.values():
            if facts.parents.get(anchor) is block and facts.start_of(anchor) < facts.start_of(first):
                first = firsts[block] = anchor
    for block, statement in firsts.items():
        edits.imports.add("torch")
        imported_too = block is facts.module and facts.main_guard is not None
        code = EARLY_JOIN_CODE.format(running='__name__ == "__main__" and ' if imported_too else "")
        join = edits.statements(code)
        join[0] = join[0].with_changes(leading_lines=[cst.EmptyLine(comment=cst.Comment(EARLY_JOIN_COMMENT))])
        edits.insert_before(statement, Insertion(join, takes_blank_lines=True), first=True)


def _place_after_choice(facts: Facts, edits: Edits, plan: Plan) -> None:
    """The script's own device choice stays; the setup follows it. What is needed before
    the choice gets the setup earlier: output guards only the environment part; a sampler
    or a download barrier the process group too, on each device type's default backend."""
    choice = plan.choice_statement
    assert choice is not None  # place() calls this only for a plan with a choice statement
    body: list[BlockItem] = list(plan.block.body)
    anchor = _first_statement_needing_setup(facts, edits, plan)
    needs_group = _first_statement_needing_setup(facts, edits, plan, guards_too=False)
    world_size = WORLD_SIZE_CODE if plan.needs_world_size else ""
    # The choice itself may need the setup: a print in one of its branches.
    early = anchor is not None and (body.index(anchor) < body.index(choice)
                                    or anchor is choice and _edited_inside(edits, facts, choice))
    group_early = needs_group is not None and body.index(needs_group) < body.index(choice)
    comment = cst.EmptyLine(comment=cst.Comment(SETUP_COMMENT))
    chosen = plan.device
    if plan.bare_accelerator:
        # current_accelerator() is None on a machine without one: that is the CPU.
        chosen = f'{plan.device} if {plan.device} is not None else "cpu"'
    if plan.device_is_string:
        # EARLY_GROUP_CODE already made the accelerator current: the string needs nothing more.
        if plan.device_kind_unknown:
            refine_string = REFINE_ANY_GIVEN_CODE if plan.device_given else REFINE_ANY_CODE
        else:
            refine_string = REFINE_GIVEN_STRING_CODE if plan.device_given else REFINE_STRING_CODE
        string_code = (fsdp2.bound_to_device(refine_string, fsdp2.BOUND_TO_STRING_DEVICE)
                       if edits.options.fsdp2 else refine_string)
        refine = "" if group_early else string_code.format(device=plan.device)
    else:
        refine_code = fsdp2.bound_to_device(REFINE_CODE) if edits.options.fsdp2 else REFINE_CODE
        refine = (REFINE_AFTER_EARLY_GROUP_CODE if group_early else refine_code).format(
            device=plan.device, chosen=chosen)
    if early and anchor is not None:  # (early implies an anchor)
        code = ENVIRONMENT_CODE + world_size
        if group_early:
            code += EARLY_GROUP_CODE
        if "is_main" in plan.guards_used:
            code += IS_MAIN_CODE if group_early else IS_MAIN_FROM_ENVIRONMENT_CODE
        prelude = edits.statements(_for_this_script(code, facts, plan))
        prelude[0] = prelude[0].with_changes(leading_lines=[comment])
        edits.insert_before(anchor, Insertion(prelude, takes_blank_lines=True), first=True)
        after = edits.statements(_for_this_script(refine, facts, plan))
    else:
        code = ENVIRONMENT_CODE + world_size + refine
        if "is_main" in plan.guards_used:
            code += IS_MAIN_CODE
        after = edits.statements(_for_this_script(code, facts, plan))
        after[0] = after[0].with_changes(leading_lines=[comment])
    edits.insert_after(choice, after, first=True)
    edits.report("DDP001", choice)
    if not group_early:  # (the early group made this rank's accelerator current already)
        _report_moves_inside_the_choice(facts, edits, choice)


def _report_moves_inside_the_choice(facts: Facts, edits: Edits, choice: BlockItem) -> None:
    """Rule: the setup follows the script's device choice, so a model moved inside that choice
    (`if torch.cuda.is_available(): device = torch.device("cuda"); model = model.to(device)`)
    moves before this rank's GPU is made current: every rank puts it on GPU 0, and the wrap's
    device_ids=[local_rank] fails on the others (or they all share one GPU). DDP007 names
    the move; the fix is to move the model after the choice."""
    if not isinstance(choice, cst.BaseCompoundStatement):
        return
    for model in facts.models:
        for call in facts.device_moves.get(model.name, ()):
            if facts.ancestor_in(call, choice) is None:
                continue
            if call.args and string_value(call.args[0].value) == "cpu":
                continue
            edits.report("DDP007", call, (
                f"`{edits.code(call)}` moves `{model.name}` inside the device choice, before the setup "
                f"after it makes this rank's GPU the current one: every rank would put it on the first "
                f"GPU; move it after the choice"))
            return


def _edited_inside(edits: Edits, facts: Facts, statement: BlockItem) -> bool:
    """Whether an edit of another rule (a rank-0 guard) lies inside the statement."""
    return any(node is not statement and facts.ancestor_in(node, statement) is not None
               for node in edits.edited_nodes())


def placed_above(facts: Facts, edits: Edits, plan: Plan, statement: BlockItem) -> bool:
    """Whether the whole setup block (the process group joined) will stand above `statement`
    of its block, as `place` puts it: before the first statement that needs it, which the
    rules planned so far already name (what later rules add can only move it up). Not where
    the script's own device choice stays and the setup follows it (_place_after_choice)."""
    if plan.choice_statement is not None or plan.called_repeatedly:
        return False
    first = _first_statement_needing_setup(facts, edits, plan)
    return first is not None and facts.start_of(first) <= facts.start_of(statement)


def _first_statement_needing_setup(facts: Facts, edits: Edits, plan: Plan,
                                   guards_too: bool = True) -> Optional[BlockItem]:
    body: list[BlockItem] = list(plan.block.body)
    candidates: list[BlockItem] = []
    if plan.device_assignment is not None:
        candidates.append(plan.device_assignment.statement)
    touched = edits.edited_nodes(include_guarded=guards_too)
    if not guards_too:
        touched = [node for node in touched if node not in plan.guard_nodes]
    # `train_loader = get_blobs(train=True)`: a loader another module of the project builds,
    # which gets its DistributedSampler there only if the group is joined when it is built.
    made_elsewhere = [loader.call for loader in facts.external_loaders
                      if not isinstance(loader.statement, cst.FunctionDef)]
    # `prepare_data(root)` of another module downloads between barriers that ask whether the
    # group exists: joined only after the call, every rank would download at once.
    made_elsewhere += facts.helper_download_calls
    made_elsewhere += plan.built_sharding_themselves
    touched += allocations_on_the_current_gpu(facts)
    for node in touched + _calls_of_functions_holding(facts, touched, plan) + made_elsewhere:
        statement = facts.ancestor_in(node, plan.block)
        # Definitions run nothing: code inside them needs the setup only when called.
        if statement is not None and not isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            candidates.append(statement)
    if not candidates:
        return _first_code_statement(body) if guards_too else None
    return min(candidates, key=body.index)


def allocations_on_the_current_gpu(facts: Facts) -> list[cst.Call]:
    """Rule (follow device values): `Tensor = torch.cuda.FloatTensor if cuda else
    torch.FloatTensor` (the PyTorch-GAN idiom), then `Tensor(n, 1)`, `FloatTensor(np.zeros(...))`
    or `imgs.type(Tensor)`: a legacy CUDA tensor type allocates on the current GPU, which is
    GPU 0 until the setup's set_device has run. Each such call (and each call of the function
    that holds it) needs the setup above it, like an edited statement: a fixed sample drawn at
    the top of the script would otherwise sit on GPU 0 on every rank."""
    typed = {name for name, values in facts.assigned_values.items()
             if any(_names_a_cuda_tensor_type(value) for value in values)}
    def a_type(value: cst.BaseExpression) -> bool:
        return dotted_name(value) in typed or _names_a_cuda_tensor_type(value)

    return [call for call in facts.nodes_of(cst.Call) if a_type(call.func) or (
        isinstance(call.func, cst.Attribute) and call.func.attr.value == "type" and call.args
        and a_type(call.args[0].value))] + gpu_made_the_default(facts)


def _report_default_gpu_before_shuffled_samplers(facts: Facts, edits: Edits) -> None:
    """DDP010: the GPU made the default device in a script whose loaders shuffle (each gets a
    DistributedSampler, whose CPU generator torch.randperm refuses on a CUDA default device)."""
    if any(loader.shuffles for loader in facts.loaders):
        for call in gpu_made_the_default(facts):
            edits.report("DDP010", call)


def gpu_made_the_default(facts: Facts) -> list[cst.Call]:
    """Rule (follow device values): `torch.set_default_device("cuda")` or
    `torch.set_default_tensor_type("torch.cuda.FloatTensor")` (older scripts, LLM scripts):
    every tensor and module made afterwards goes to the current GPU. The script uses the GPU
    (not a CPU-only script: the setup pins this rank's GPU and wraps with its device_ids),
    and the call needs the setup above it, so that "cuda" is this rank's GPU, not GPU 0."""
    found = []
    for call in facts.nodes_of(cst.Call):
        callee = dotted_name(call.func)
        if callee not in ("torch.set_default_device", "torch.set_default_tensor_type") or not call.args:
            continue
        given = call.args[0].value
        text = string_value(given) or dotted_name(given) or ""
        if isinstance(given, cst.Call) and dotted_name(given.func) == "torch.device" and given.args:
            text = string_value(given.args[0].value) or ""
        if text.startswith(("cuda", "torch.cuda.")):
            found.append(call)
    return found


def _names_a_cuda_tensor_type(value: cst.BaseExpression) -> bool:
    """`torch.cuda.FloatTensor`, or a conditional expression one of whose arms is one."""
    if isinstance(value, cst.IfExp):
        return _names_a_cuda_tensor_type(value.body) or _names_a_cuda_tensor_type(value.orelse)
    return _is_cuda_tensor_type(dotted_name(value))


def _is_cuda_tensor_type(name: Optional[str]) -> bool:
    return name is not None and name.startswith("torch.cuda.") and name.endswith("Tensor")


def _calls_of_functions_holding(facts: Facts, nodes: Iterable[cst.CSTNode],
                                plan: Plan) -> list[cst.Call]:
    """Calls of the functions that hold edited code: `make_loaders()` needs the process
    group if the loader it builds now gets a DistributedSampler. Followed up through their
    callers (`setup_run()` calling `make_run_dir()`), and `Logger(...)` runs
    `Logger.__init__`: the chain's call in the setup's block is the one that must follow it."""
    calls: list[cst.Call] = []
    # (Their order does not matter: the caller takes the earliest statement of them all.)
    holding = {function for function in map(facts.function_of, nodes) if function is not None}
    seen = {plan.function}
    for _ in range(3):  # (three calls deep, as the effects of other modules are read)
        pending = holding - seen
        seen |= pending
        holding = set()
        for function in pending:
            for call in calls_running(facts, function) if function is not None else ():
                calls.append(call)
                caller = facts.function_of(call)
                if caller is not None:
                    holding.add(caller)
    return calls


def _is_docstring(statement: BlockItem) -> bool:
    return (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
            and isinstance(statement.body[0], cst.Expr)
            and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString)))


def compound_importing_torch(facts: Facts) -> Optional[cst.BaseCompoundStatement]:
    """`try: import torch ... except ImportError: print(e)` at the top of a script: the
    statement that binds `torch`, which the setup reads, when it is not a plain import;
    None when a plain import binds it first."""
    for statement in facts.module.body:
        imported = imports_of(statement) if not isinstance(statement, cst.BaseCompoundStatement) \
            else find_all(statement, cst.Import)
        if any(isinstance(node, cst.Import) and any(
                alias.asname is None and (dotted_name(alias.name) or "").split(".")[0] == "torch"
                for alias in node.names) for node in imported):
            return statement if isinstance(statement, cst.BaseCompoundStatement) else None
    return None


def torch_bound_by_import(facts: Facts) -> bool:
    """Whether a plain `import torch` (or `import torch.nn`, which binds `torch` too) of the
    module binds the name the emitted code reads; `import torch as t` alone does not. A star
    import (`from common import *`) is taken to bind it: the module it reads often imports
    torch for the script."""
    for statement in facts.module.body:
        imported = imports_of(statement) if not isinstance(statement, cst.BaseCompoundStatement) \
            else find_all(statement, cst.Import)
        if any(isinstance(node, cst.ImportFrom) and isinstance(node.names, cst.ImportStar) for node in imported):
            return True
        if any(isinstance(node, cst.Import) and any(
                alias.asname is None and (dotted_name(alias.name) or "").split(".")[0] == "torch"
                for alias in node.names) for node in imported):
            return True
    return False


def _after_torch_import(facts: Facts, plan: Plan, anchor: Optional[BlockItem]) -> Optional[BlockItem]:
    """The setup reads `torch`: never above the statement that imports it."""
    binding = plan.torch_imported_in
    body: list[BlockItem] = list(plan.block.body)
    if binding is None or anchor is None or plan.block is not facts.module or anchor not in body \
            or body.index(anchor) > body.index(binding):
        return anchor
    following = body[body.index(binding) + 1:]
    return following[0] if following else None


def _first_code_statement(body: Sequence[BlockItem]) -> Optional[BlockItem]:
    """The first statement that runs code: not a definition, an import or the docstring."""
    for statement in body:
        if not isinstance(statement, (cst.FunctionDef, cst.ClassDef)) and not imports_of(statement) \
                and not _is_docstring(statement):
            return statement
    return None


def add_guard_helper(edits: Edits, plan: Plan) -> None:
    if "is_main_process()" in plan.guards_used:
        edits.imports.update({"os", "dist"})
        edits.add_helper("is_main_process", IS_MAIN_HELPER)


def teardown(facts: Facts, edits: Edits, plan: Plan) -> None:
    """Destroy the group once, after training: around the call to main() when there is one,
    so that it also runs when training raises, else at the end of the script."""
    if plan.function is None and plan.block is not facts.module:
        # The setup runs under `if __name__ == "__main__":`, and so does its teardown.
        statements = edits.statements(TEARDOWN_CODE)
        statements[0] = statements[0].with_changes(leading_lines=[cst.EmptyLine(indent=False)])
        edits.insert_after(plan.block.body[-1], statements)
        edits.report("DDP005", plan.block.body[-1])
        return
    if plan.function is None:
        statements = edits.statements(TEARDOWN_CODE)
        # A parsed module keeps a leading blank line in its header; put it back on the code.
        statements[0] = statements[0].with_changes(leading_lines=[cst.EmptyLine()])
        edits.module_end.extend(statements)
        edits.report("DDP005", facts.module.body[-1])
        return
    call = _call_of_function_under_main(facts, plan.function.name.value)
    guard = facts.main_guard
    if call is not None and guard is not None and call is guard.body.body[-1]:
        edits.finally_bodies[call] = edits.statements(TEARDOWN_IF_INITIALIZED)
        edits.report("DDP005", call)
        return
    if guard is not None and isinstance(guard.body, cst.IndentedBlock) and _dispatches_and_exits(
            facts, guard.body.body[-1]):
        edits.finally_bodies[guard.body.body[-1]] = edits.statements(TEARDOWN_IF_INITIALIZED)
        edits.report("DDP005", guard.body.body[-1])
        return
    # Code after the call (`model = main(); torch.save(...)`) still needs the group: its
    # rank-0 guard and its barriers ask it. The teardown goes after it, in the same block.
    cleanup = edits.statements(TEARDOWN_IF_INITIALIZED)
    if guard is not None and isinstance(guard.body, cst.IndentedBlock):
        edits.insert_after(guard.body.body[-1], cleanup)
        edits.report("DDP005", guard)
        return
    cleanup[0] = cleanup[0].with_changes(leading_lines=[cst.EmptyLine()])
    edits.module_end.extend(cleanup)
    edits.report("DDP005", facts.module.body[-1])


def _dispatches_and_exits(facts: Facts, statement: BlockItem) -> bool:
    """Rule: `main()` of a click group, `app()` of a typer app, `fire.Fire()`: the command
    line picks the function that sets up, and the call ends with sys.exit() (click's
    standalone mode), so a line after it never runs: the teardown goes in a `finally`."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1 \
            or not isinstance(statement.body[0], cst.Expr) or not isinstance(statement.body[0].value, cst.Call):
        return False
    called = dotted_name(statement.body[0].value.func) or ""
    if called.rpartition(".")[2] == "Fire":
        return True
    return any(registering_group(decorator.decorator) == called for definition in facts.module.body
               if isinstance(definition, cst.FunctionDef) for decorator in definition.decorators)


def _call_of_function_under_main(facts: Facts, function_name: str) -> Optional[cst.SimpleStatementLine]:
    guard = facts.main_guard
    if guard is None or not isinstance(guard.body, cst.IndentedBlock):
        return None
    for statement in guard.body.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            value = getattr(small, "value", None)
            if (
                isinstance(value, cst.Call)
                and isinstance(value.func, cst.Name)
                and value.func.value == function_name
            ):
                return statement
    return None


_HEAD, _BODY = TRAINING.split('device = torch.device("cuda" if torch.cuda.is_available() else "cpu")\n')
_DEVICE_PARAMETER = _HEAD + "\n\ndef run(device=None):\n" + textwrap.indent(
    'device = device or ("cuda" if torch.cuda.is_available() else "cpu")\n' + _BODY, "    ")

CASES = (
    # The GPU made the default device before a shuffled loader: the sampler's CPU generator fails.
    Emits(TRAINING.replace("device = torch", 'torch.set_default_device("cuda")\ndevice = torch'), "DDP010", ()),
    Silent(TRAINING.replace("device = torch", 'torch.set_default_device("cpu")\ndevice = torch'), "DDP010"),
    # `device = device or "cuda"...` on a parameter no call gives: the choice, followed.
    Silent(_DEVICE_PARAMETER + "\n\nrun()\n", "DDP007"),
    # A caller that gives the device may give a fixed GPU.
    Emits(_DEVICE_PARAMETER + '\n\nrun(device="cuda:1")\n', "DDP007", ()),
    Emits(TRAINING, "DDP001", ("dist.init_process_group(", 'local_rank = int(os.environ.get("LOCAL_RANK", 0))')),
    Emits(TRAINING, "DDP005", ("dist.destroy_process_group()",)),
    # No device anywhere, and a tensor made in the loop without one (placing the batches on the
    # GPU would leave it behind): the ranks train on the CPU, and the user is told why and how.
    Emits(TRAINING.replace(").to(device)", ")").replace(".to(device)", "").replace(
        'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")\n', "").replace(
        "        loss = torch", "        shift = torch.zeros(1)\n        loss = torch"),
        "DDP011", ('dist.init_process_group("gloo")',)),
    Silent(TRAINING, "DDP011"),
    # A typer app's command runs when the command line names it; app() ends in sys.exit().
    Emits("import typer\n" + _HEAD + "\napp = typer.Typer()\n\n\n@app.command()\ndef fit(epochs: int = 2):\n"
          + textwrap.indent('device = "cuda" if torch.cuda.is_available() else "cpu"\n' + _BODY, "    ")
          + '\n\nif __name__ == "__main__":\n    app()\n', "DDP005",
          ("dist.init_process_group(", "    try:\n        app()\n    finally:\n")),
    Emits('''\
import torch
from torch.utils.data import DataLoader, TensorDataset


def get_device():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return device


model = torch.nn.Linear(4, 1).to(get_device())
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
for epoch in range(3):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x.to(get_device())), y.to(get_device()))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
''', "DDP009", ("if not dist.is_initialized():",)),
    Silent(TRAINING, "DDP009"),
    # A device from a helper of another module: not the CPU, and not one ddpify can read.
    Emits(TRAINING.replace('device = torch.device("cuda" if torch.cuda.is_available() else "cpu")',
                           "device = pick_device()")
          .replace("import torch\n", "import torch\nfrom hw import pick_device\n", 1),
          "DDP007", ('dist.init_process_group("cpu:gloo,cuda:nccl"',)),
    Silent(TRAINING, "DDP007"),
)
