"""Device moves: every fixed GPU becomes this rank's device (DDP002, DDP003, DDP004).

`.cuda()`, `.to("cuda")`, `.to(0)` and `torch.device("cuda:0")` all name GPU 0 on every rank
and fail on a CPU-only machine; the setup block's device names the rank's own GPU, or the CPU.
"""
from typing import Callable, Optional, cast

import libcst as cst

from ddpify.analysis import names
from ddpify.analysis.control import Facts
from ddpify.analysis.nodes import argument_for, dotted_name, is_fixed_gpu, string_value
from ddpify.diagnostics import Rule, Severity, Status
from ddpify.emit.edits import Edits, replacement
from ddpify.plan import Plan
from ddpify.rules.cases import TRAINING, Emits, Silent
from ddpify.rules.setup import (
    gpu_index_codes,
    group_joined_before,
    integer_options,
    is_gpu_index,
    moves_to_a_gpu_index,
)

RULES = (
    Rule("DDP002", Severity.EDIT, "device move rewritten to this rank's device",
         "`.cuda()`, `\"cuda:0\"` and integer devices all point at GPU 0, so every rank "
         "would pile onto one GPU and a CPU-only machine would crash.",
         "Nothing to do."),
    Rule("DDP003", Severity.WARNING, "device chosen where the rank's device is not in scope",
         "The code moves data to a fixed GPU in a place that cannot see the `device` the "
         "setup block defines.",
         "Pass `device` into this function and use `.to(device)`."),
    Rule("DDP004", Severity.WARNING, "CUDA_VISIBLE_DEVICES set from inside the script",
         "torchrun gives each process its LOCAL_RANK; hiding GPUs from inside the script "
         "makes every rank see the same device.",
         "Remove the assignment and choose GPUs with CUDA_VISIBLE_DEVICES on the command line."),
    Rule("DDP006", Severity.WARNING, "torch.accelerator device choice became CUDA-or-CPU (retired: the choice is kept)",
         "Retired: never reported. ddpify once replaced a torch.accelerator device choice "
         "with CUDA-or-CPU (an XPU, MPS or HPU would then run on the CPU) and warned so; it "
         "now keeps the script's choice and takes that device type at index LOCAL_RANK. The "
         "code stays listed because codes are never reused.",
         "Nothing to do; a `# ddpify: ignore[DDP006]` comment is reported as unused.",
         status=Status.REMOVED),
    Rule("DDP008", Severity.EDIT, "comparison of the device with a string keeps its meaning",
         "Under torchrun the device becomes this rank's torch.device (cuda:1), which never "
         "equals the string \"cuda\": cuDNN flags and pin_memory keyed on it would be lost.",
         "Nothing to do."),
)


def plan(facts: Facts, edits: Edits, setup: Plan) -> None:
    if setup.library or setup.device_elsewhere:
        # (No device is named here: the setup made this rank's accelerator the current one.)
        _current_device_in_helper_module(facts, edits, setup)
        if setup.library:
            _current_index_for_a_computed_gpu(facts, edits)
        return
    device = setup.device
    _keep_device_choice(edits, setup)
    _index_of_this_rank_in_string_choice(facts, edits, setup)
    for call in [*facts.fixed_device_moves, *moves_to_a_gpu_index(facts)]:
        if not setup.sees_setup(facts, call):
            if group_joined_before(facts, setup, call) or _current_gpu_during_training(facts, call):
                # Only after the setup (or only while training): its set_device has made this
                # rank's GPU the current one, so `.cuda()` there is right as written, and
                # `.cuda(0)` becomes it.
                _to_current_device(edits, call)
                continue
            edits.report("DDP003", call, f"fixed GPU here cannot see `{device}`: pass it in and use .to({device})")
            continue
        if setup.device_assignment is None and _bound_only_after(facts, device, call):
            # `try: model = model.cuda(); device = "cuda"`: the name does not exist yet at the
            # move; the setup above has made this rank's GPU the current one, so `.cuda()`
            # names it as written (and `.cuda(0)` becomes it).
            _to_current_device(edits, call)
            continue
        edits.expressions[call] = _move_to(edits, device)
        edits.report("DDP002", call)
    _fixed_device_values(facts, edits, setup)
    for statement in facts.set_device_statements:
        # The setup block pins the process to LOCAL_RANK; a fixed set_device would undo it.
        edits.removed.add(statement)
        edits.report("DDP002", statement)
    _device_contexts_for_plain_python(facts, edits, setup)
    for statement in facts.visible_devices_statements:
        edits.report("DDP004", statement)
    _keep_device_comparisons(facts, edits, setup)
    if not setup.cpu_only:
        _fixed_gpu_strings_left(facts, edits, setup)
        _devices_built_from_a_gpu_index(facts, edits, setup)


def _fixed_device_values(facts: Facts, edits: Edits, setup: Plan) -> None:
    """`torch.device("cuda:0")`, `torch.device(1)`: the setup's device where it is in view; a
    literal index out of its view names that GPU on every rank, and becomes the current GPU
    where the setup has run (`torch.device("cuda")`), else is reported (DDP003)."""
    device = setup.device
    for value in facts.fixed_device_values:
        if _in_choice(facts, setup, value):
            continue  # the setup takes the choice's place, or keeps it as written
        if setup.sees_setup(facts, value):
            edits.expressions[value] = lambda _node: cst.Name(device)
            edits.report("DDP002", value)
        elif isinstance(value, cst.Call) and isinstance(value.args[0].value, cst.Integer):
            function = facts.function_of(value)
            if group_joined_before(facts, setup, value) or (
                    function is not None and _runs_only_while_training(facts, function)):
                _index_to_current_gpu(edits, value.args[0].value)
            else:
                edits.report("DDP003", value, f"fixed GPU here cannot see `{device}`: pass it in and use it")


DEVICE_CONTEXT_CODE = "contextlib.nullcontext() if {distributed} else {context}"


def _device_contexts_for_plain_python(facts: Facts, edits: Edits, setup: Plan) -> None:
    """Rule: `with torch.cuda.device(args.gpu_index):` makes the script's GPU the current one
    on every rank while its block runs (the training, often), undoing the setup's pin to
    LOCAL_RANK: `.cuda()`, `device="cuda"` and the gathers of evaluation figures would all
    land on that one GPU (NCCL: duplicate GPU, or tensors on two devices). Under torchrun the
    context becomes `contextlib.nullcontext()`, the rank's GPU staying current; plain
    `python` enters it as before. (The block is not re-indented.)"""
    for call in facts.device_contexts:
        distributed = "distributed" if setup.sees_setup(facts, call) else "dist.is_initialized()"
        code = f"({DEVICE_CONTEXT_CODE.format(distributed=distributed, context=edits.code(call))})"
        edits.expressions[call] = _expression_of(edits, code)
        edits.imports.add("contextlib")
        if distributed != "distributed":
            edits.imports.add("dist")
        edits.report("DDP002", call, "device context of the script's GPU entered by plain `python` only: "
                     "under torchrun this rank's GPU stays the current one")


def _expression_of(edits: Edits, code: str) -> Callable[[cst.BaseExpression], cst.BaseExpression]:
    return lambda _node: edits.expression(code)


def _fixed_gpu_strings_left(facts: Facts, edits: Edits, setup: Plan) -> None:
    """Rule: a "cuda:0" no other edit rewrites (a config class's `device = "cuda:0"`, an
    argparse default, a settings dict) names GPU 0 on every rank. The setup makes this
    rank's GPU the current one, so it becomes "cuda", still a string: that GPU once the
    setup has run, and GPU 0 as before under plain `python`."""
    edited = [*edits.expressions, *edits.removed, *edits.replaced]
    for string in facts.fixed_gpu_strings:
        if _in_choice(facts, setup, string) or _default_the_setup_refines(facts, setup, string) or any(
                node is string or facts.ancestor_in(string, node) is not None for node in edited):
            continue
        _to_current_gpu(facts, edits, string)
        edits.standalone.add(string)


def _devices_built_from_a_gpu_index(facts: Facts, edits: Edits, setup: Plan) -> None:
    """Rule: a device made from the script's GPU index (`args.gpu`, what `.cuda(X)` or
    set_device is handed; is_gpu_index), `device=args.gpu`, `f"cuda:{args.gpu}"`,
    `"cuda:{}".format(args.gpu)`, `"cuda:%d" % args.gpu`, `torch.device("cuda", args.gpu)`,
    names that one GPU on every rank: noise drawn there meets a batch on this rank's GPU
    (NCCL: tensors on two devices), and `torch.load(..., map_location=loc)` puts every
    rank's copy of the checkpoint on it. As `.cuda(args.gpu)` becomes `.cuda()`, it becomes
    the current GPU, the one the setup made this rank's: `"cuda"` (still a string) or
    `torch.device("cuda")`, and the setup's own `device` where it is in view for a bare index
    (`device=0` as well, GPU 0 named by its number).
    A device handed to the function that holds the setup (`train(args, torch.device(
    f"cuda:{args.gpu}" ...))`) stays: the setup refines that parameter itself, and plain
    `python` keeps the user's GPU."""
    indices, options = gpu_index_codes(facts), integer_options(facts)
    edited = [*edits.expressions, *edits.removed, *edits.replaced]
    handed_to_setup = [arg for call in facts.calls_of(setup.function) for arg in call.args] \
        if setup.device_from_parameter and setup.function is not None else []
    kept = [*edited, *handed_to_setup]
    def index(value: cst.BaseExpression) -> bool:
        # (`device=0` too: GPU 0, as `.to(0)` is.)
        return isinstance(value, cst.Integer) and is_fixed_gpu(value) or is_gpu_index(facts, value, indices, options)

    for node, current in _devices_from_an_index(facts, setup, index):
        if _in_choice(facts, setup, node) or any(
                other is node or facts.ancestor_in(node, other) is not None for other in kept):
            continue
        edits.expressions[node] = replacement(edits, current)
        edits.report("DDP002", node)


def _devices_from_an_index(facts: Facts, setup: Plan, index: Callable[[cst.BaseExpression], bool]
                           ) -> list[tuple[cst.BaseExpression, str]]:
    """The expressions that make a device of a GPU index, each with what replaces it."""
    found: list[tuple[cst.BaseExpression, str]] = []
    torch_devices = set(facts.calls_named.get(names.TORCH_DEVICE, ()))
    for call in facts.nodes_of(cst.Call):
        found += [(value, setup.device if setup.sees_setup(facts, value) else '"cuda"') for arg in call.args
                  if arg.keyword is not None and arg.keyword.value == "device"
                  for value in _arms(arg.value) if index(value)]
        if isinstance(call.func, cst.Attribute) and call.func.attr.value == "to" and call.args \
                and call.args[0].keyword is None and isinstance(call.args[0].value, cst.IfExp):
            # `.to(gpu if use_gpu else "cpu")`: the index arm names GPU 0 on every rank.
            found += [(value, setup.device if setup.sees_setup(facts, value) else '"cuda"')
                      for value in _arms(call.args[0].value) if index(value)]
        if call in torch_devices and len(call.args) == 2 and string_value(call.args[0].value) == "cuda" \
                and index(call.args[1].value):
            found.append((call, 'torch.device("cuda")'))
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value == "format" and len(call.args) == 1 \
                and string_value(func.value) in ("cuda:{}", "cuda:{0}") and index(call.args[0].value):
            found.append((call, '"cuda"'))
    for formatted in facts.nodes_of(cst.FormattedString):
        parts = formatted.parts
        if len(parts) == 2 and isinstance(parts[0], cst.FormattedStringText) and parts[0].value == "cuda:" \
                and isinstance(parts[1], cst.FormattedStringExpression) and index(parts[1].expression):
            found.append((formatted, '"cuda"'))
    found += [(operation, '"cuda"') for operation in facts.nodes_of(cst.BinaryOperation)
              if _formats_an_index(operation, index)]
    return found


def _arms(value: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The values a conditional expression may give (`gpu if use_gpu else "cpu"`: both arms);
    the value itself otherwise."""
    if isinstance(value, cst.IfExp):
        return [*_arms(value.body), *_arms(value.orelse)]
    return [value]


def _formats_an_index(operation: cst.BinaryOperation, index: Callable[[cst.BaseExpression], bool]) -> bool:
    """`"cuda:%d" % gpu` or `"cuda:" + str(gpu)`."""
    right = operation.right
    if isinstance(operation.operator, cst.Modulo) and string_value(operation.left) in ("cuda:%d", "cuda:%s", "cuda:%i"):
        single = right.elements[0].value if isinstance(right, cst.Tuple) and len(right.elements) == 1 else right
        return index(single)
    return isinstance(operation.operator, cst.Add) and string_value(operation.left) == "cuda:" \
        and isinstance(right, cst.Call) and dotted_name(right.func) == "str" and len(right.args) == 1 \
        and index(right.args[0].value)


def _default_the_setup_refines(facts: Facts, setup: Plan, string: cst.SimpleString) -> bool:
    """`def train(device="cuda:1")` where the setup block takes `device` from that parameter:
    under torchrun the setup itself drops the index (each rank on its own GPU), so the
    default stays as written and plain `python` still runs on GPU 1."""
    param = facts.parents.get(string)
    return (setup.device_from_parameter and isinstance(param, cst.Param) and param.default is string
            and param.name.value == setup.device and facts.function_of(param) is setup.function)


def _to_current_gpu(facts: Facts, edits: Edits, string: cst.SimpleString) -> None:
    """Rule: a fixed GPU string becomes the current GPU, the one the setup makes this rank's,
    and stays a string. "cuda:0" becomes "cuda", which is GPU 0 under plain `python` too;
    "cuda:1" (any other index) becomes `"cuda" if "WORLD_SIZE" in os.environ else "cuda:1"`,
    so plain `python` still runs on the GPU the user named and only torchrun's ranks each
    take their own."""
    quote = f"{string.prefix}{string.quote}"
    current = f"{quote}cuda{string.quote}"
    if str(string.evaluated_value).split(":")[1].strip() not in ("0", ""):
        current = f'{current} if "WORLD_SIZE" in os.environ else {string.value}'
        parent = facts.parents.get(string)
        if not isinstance(parent, (cst.Arg, cst.Param, cst.Assign, cst.AnnAssign, cst.DictElement,
                                   cst.Element, cst.Return)):
            current = f"({current})"
        edits.imports.add("os")
    edits.expressions[string] = replacement(edits, current)
    edits.report("DDP002", string)


def _bound_only_after(facts: Facts, device: str, call: cst.Call) -> bool:
    """Rule (device values): the setup does not bind the device's name itself (it keeps the
    script's choice), and every assignment of that name in the move's scope comes after the
    move (`try: model = model.cuda(); device = "cuda"` / `except RuntimeError:
    device = "cpu"`): `.to(device)` there would read a name not bound yet (NameError)."""
    function = facts.function_of(call)
    bindings = [value for value in facts.assigned_values.get(device, ()) if facts.function_of(value) is function]
    return bool(bindings) and all(facts.start_of(value) > facts.end_of(call) for value in bindings)


def _current_gpu_during_training(facts: Facts, call: cst.Call) -> bool:
    """`def create_variable(t): return t.cuda()` called only from the training loop: a bare
    `.cuda()` names the current GPU, which the setup has made this rank's own before any
    training runs (as in a helper module), so it stays as written. Not `.cuda(0)`, and not
    in a function that may run before the setup (called anywhere but inside a loop that
    trains, directly or through other functions of the file)."""
    function = facts.function_of(call)
    return (isinstance(call.func, cst.Attribute) and call.func.attr.value == "cuda" and not call.args
            and function is not None and _runs_only_while_training(facts, function))


def _runs_only_while_training(facts: Facts, function: cst.FunctionDef, depth: int = 0) -> bool:
    calls = facts.calls_of(function)
    if depth > 3 or not calls:
        return False
    for site in calls:
        if any(facts.loop_trains(loop) for loop in facts.enclosing_loops(site)):
            continue
        caller = facts.function_of(site)
        if caller is None or caller is function or not _runs_only_while_training(facts, caller, depth + 1):
            return False
    return True


def _index_of_this_rank_in_string_choice(facts: Facts, edits: Edits, setup: Plan) -> None:
    """`"cuda:0" if ... else "cpu"` names GPU 0 on every rank. The device keeps its type, a
    string (a config dict written as JSON, `device.startswith(...)`): only its index becomes
    the rank's own, `f"cuda:{local_rank}"`, which is "cuda:0" under plain `python`. Another
    index is kept where plain `python` reads it: `(f"cuda:{local_rank}" if distributed else
    "cuda:1")`, so only torchrun's ranks change GPU."""
    if not setup.device_is_string or setup.choice_statement is None:
        return
    for string in facts.fixed_gpu_strings:
        if facts.ancestor_in(string, setup.choice_statement) is not None:
            code = f"f{string.quote}cuda:{{local_rank}}{string.quote}"
            if str(string.evaluated_value).split(":")[1].strip() not in ("0", ""):
                code = f"({code} if distributed else {string.value})"
            edits.expressions[string] = replacement(edits, code)
            edits.report("DDP002", string)
            setup.device_string_indexed = True


def _current_device_in_helper_module(facts: Facts, edits: Edits, setup: Plan) -> None:
    """In a helper module the script's setup has made this rank's GPU the current one, so a
    fixed GPU becomes "the current GPU": `"cuda:0"` -> `"cuda"` (still a string), `.cuda(0)`
    -> `.cuda()`, `.to(0)` -> `.to("cuda")`."""
    for string in facts.fixed_gpu_strings:
        _to_current_gpu(facts, edits, string)
    for call in facts.fixed_device_moves:
        _to_current_device(edits, call)
    _literal_gpu_indices_to_current_gpu(facts, edits, setup)


def _literal_gpu_indices_to_current_gpu(facts: Facts, edits: Edits, setup: Plan) -> None:
    """Rule: where the setup has made this rank's GPU the current one and its device is not
    in view (a helper module, a project whose device is chosen elsewhere), a GPU named by a
    literal index, `torch.device(1)`, `torch.ones(3, device=1)`, `torch.device("cuda", 1)`,
    names that GPU on every rank: it becomes the current GPU, `"cuda"` (as `.cuda(1)` becomes
    `.cuda()`)."""
    edited = [*edits.expressions, *edits.removed, *edits.replaced]
    for value in facts.fixed_device_values:
        if isinstance(value, cst.Call) and isinstance(value.args[0].value, cst.Integer) and value not in edited:
            _index_to_current_gpu(edits, value.args[0].value)
    for node, _ in _devices_from_an_index(facts, setup, lambda index: isinstance(index, cst.Integer)):
        if any(other is node or facts.ancestor_in(node, other) is not None for other in edited):
            continue
        edits.expressions[node] = replacement(edits, 'torch.device("cuda")' if isinstance(node, cst.Call) else '"cuda"')
        edits.report("DDP002", node)


def _index_to_current_gpu(edits: Edits, index: cst.Integer) -> None:
    """`torch.device(1)` -> `torch.device("cuda")`: the GPU the setup made current."""
    edits.expressions[index] = lambda _node: cst.SimpleString('"cuda"')
    edits.report("DDP002", index)


CURRENT_INDEX_CODE = """\
if dist.is_initialized():  # this rank's own GPU, the one its setup made current
    {device} = torch.device({device}.type, torch.accelerator.current_device_index())
"""


def _current_index_for_a_computed_gpu(facts: Facts, edits: Edits) -> None:
    """Rule: in a helper module, `device = torch.device("cuda:{}".format(self.args.gpu))`
    (an f-string, `"cuda:" + str(...)`, `torch.device("cuda", args.gpu)`): a GPU index read
    from the configuration, the same on every rank, so that every rank would put its model on
    that one GPU (NCCL refuses two ranks on one device). Under torchrun the device becomes
    this rank's own, the GPU the script's setup made current; plain `python` keeps the choice."""
    for assignment in facts.device_assignments:
        statement = assignment.statement
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) \
            and len(statement.body) == 1 else None
        if not (isinstance(small, cst.Assign) and len(small.targets) == 1
                and _gpu_by_a_computed_index(small.value)):
            continue
        target = dotted_name(small.targets[0].target)
        if target is None:
            continue
        edits.insert_after(statement, edits.statements(CURRENT_INDEX_CODE.format(device=target)))
        edits.imports.add("dist")
        edits.report("DDP002", statement)


def _gpu_by_a_computed_index(value: cst.BaseExpression) -> bool:
    """`torch.device("cuda:{}".format(i))`, `torch.device(f"cuda:{i}")`, `torch.device("cuda:" +
    str(i))`, `torch.device("cuda", i)`: one GPU, by an index that is not a literal."""
    if not (isinstance(value, cst.Call) and dotted_name(value.func) == "torch.device") or not value.args:
        return False
    first = value.args[0].value
    if len(value.args) == 2:
        return string_value(first) == "cuda" and not isinstance(value.args[1].value, cst.Integer)
    if isinstance(first, cst.FormattedString):
        return any(isinstance(part, cst.FormattedStringText) and part.value.startswith("cuda:")
                   for part in first.parts[:1])
    if isinstance(first, cst.Call) and isinstance(first.func, cst.Attribute) and first.func.attr.value == "format":
        text = string_value(first.func.value)
        return text is not None and text.startswith("cuda:")
    if isinstance(first, cst.BinaryOperation) and isinstance(first.operator, cst.Add):
        text = string_value(first.left)
        return text is not None and text == "cuda:"
    return False


def _to_current_device(edits: Edits, call: cst.Call) -> None:
    """`.cuda(0)` -> `.cuda()`, `.to(0)` -> `.to("cuda")`, `.to(device=1)` -> `.to(device="cuda")`:
    the GPU set_device made current."""
    func = cast(cst.Attribute, call.func)
    given = _device_argument(call)
    if given is None or isinstance(given.value, cst.SimpleString):
        return  # `.cuda()` is already the current GPU; strings are done apart
    if func.attr.value == "cuda":
        kept = [arg for arg in call.args if arg is not given]
    else:
        kept = [arg.with_changes(value=cst.SimpleString('"cuda"')) if arg is given else arg for arg in call.args]
    edits.expressions[call] = _with_args([arg.with_changes(comma=cst.MaybeSentinel.DEFAULT) for arg in kept])
    edits.report("DDP002", call)


def _device_argument(call: cst.Call) -> Optional[cst.Arg]:
    """The argument of `.cuda(...)` or `.to(...)` that names the device: the first
    positional one, or `device=` (`.cuda(device=1)`, `.to(device=0, non_blocking=True)`)."""
    value = argument_for(call, "device", 0)
    return None if value is None else next(arg for arg in call.args if arg.value is value)


def _with_args(args: list[cst.Arg]) -> Callable[[cst.Call], cst.Call]:
    def rewrite(call: cst.Call) -> cst.Call:
        return call.with_changes(args=args)

    return rewrite


def _keep_device_comparisons(facts: Facts, edits: Edits, setup: Plan) -> None:
    """`device == "cuda"` is False once `device` is a torch.device (cuda:1 under torchrun):
    compare its type. Where plain `python` keeps the script's string, both must work."""
    if setup.device_is_string:
        return  # the device stays the script's string: its comparisons keep their meaning
    device = setup.device
    replaced = setup.device_assignment is not None
    for comparison in facts.string_comparisons:
        if not setup.sees_setup(facts, comparison) or _in_choice(facts, setup, comparison):
            continue
        target = comparison.comparisons[0]
        operator = target.operator
        if isinstance(operator, (cst.Equal, cst.NotEqual)):
            sides = [comparison.left, target.comparator]
            if not any(isinstance(side, cst.Name) and side.value == device for side in sides):
                continue
            kind = f"{device}.type" if replaced else f"torch.device({device}).type"
        elif isinstance(operator, (cst.In, cst.NotIn)):
            if not (isinstance(target.comparator, cst.Name) and target.comparator.value == device):
                continue
            kind = f"str({device})"
        else:
            continue
        edits.expressions[comparison] = _device_side_becomes(device, kind, edits)
        edits.report("DDP008", comparison)


def _in_choice(facts: Facts, setup: Plan, node: cst.CSTNode) -> bool:
    """Inside the statement that chooses the device (replaced, or kept as written)."""
    choice = setup.device_assignment.statement if setup.device_assignment else setup.choice_statement
    return choice is not None and facts.ancestor_in(node, choice) is not None


def _device_side_becomes(device: str, kind: str,
                         edits: Edits) -> Callable[[cst.Comparison], cst.Comparison]:
    def rewrite(comparison: cst.Comparison) -> cst.Comparison:
        def swap(side: cst.BaseExpression) -> cst.BaseExpression:
            return edits.expression(kind) if isinstance(side, cst.Name) and side.value == device else side
        target = comparison.comparisons[0]
        return comparison.with_changes(
            left=swap(comparison.left),
            comparisons=[target.with_changes(comparator=swap(target.comparator))])

    return rewrite


def _move_to(edits: Edits, device: str) -> Callable[[cst.Call], cst.Call]:
    """`.cuda()` -> `.to(device)`; the device may be an attribute (`self.device`, chosen in
    the object's `__init__`)."""
    def rewrite(call: cst.Call) -> cst.Call:
        given = _device_argument(call)
        func = cast(cst.Attribute, call.func)  # a fixed device move is a method: `.cuda()`, `.to(0)`
        if func.attr.value == "to" and given is not None:
            # `.to("cuda", dtype)`, `.to(device=0)`: only the device changes.
            args = [arg.with_changes(value=edits.expression(device)) if arg is given else arg for arg in call.args]
        else:
            # `.cuda(1, non_blocking=True)`, `.cuda(device=1)`: the index goes, the keywords stay.
            args = [cst.Arg(edits.expression(device))] + [arg for arg in call.args if arg.keyword is not None
                                                   and arg is not given]
        args = [arg.with_changes(comma=cst.MaybeSentinel.DEFAULT) for arg in args]
        return call.with_changes(func=func.with_changes(attr=cst.Name("to")), args=args)

    return rewrite


def _keep_device_choice(edits: Edits, setup: Plan) -> None:
    """The setup block replaces the script's device choice: keep the choice's own test, so
    that `--no-cuda` or `--device cpu` still selects the CPU."""
    assignment = setup.device_assignment
    if assignment is None:
        return
    condition = assignment.gpu_condition
    if condition is not None and dotted_name(edits.expression(condition)) is None:
        # The setup block tests it three times: name it once (`torch.device(args.device)...`).
        name = edits.facts.free_name("use_cuda")
        # Named at the top of the setup block, which may go above the device choice.
        setup.gpu_condition_code = f"{name} = {condition}\n"
        condition = name
    if condition is not None:
        setup.use_gpu = condition


CASES = (
    Emits(TRAINING.replace("device = torch.device(\"cuda\" if torch.cuda.is_available() else \"cpu\")\n", "")
          .replace(".to(device)", ".cuda()"), "DDP002", ("model = torch.nn.Linear(4, 1).to(device)",)),
    # A device context of a fixed GPU around the training: plain `python` only.
    Emits('''\
import torch
from torch.utils.data import DataLoader, TensorDataset

device = torch.device("cuda")
loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
model = torch.nn.Linear(4, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
with torch.cuda.device(0):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
''', "DDP002", ("with (contextlib.nullcontext() if distributed else torch.cuda.device(0)):",)),
    Silent(TRAINING, "DDP002"),
    # A helper that moves to the GPU and runs before the setup (here: a warm-up at import):
    # no set_device has made the rank's GPU the current one yet.
    Emits('''\
import torch
from torch.utils.data import DataLoader, TensorDataset


def make_probe():
    return torch.randn(8, 4).cuda()


PROBE = make_probe()


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = torch.nn.Linear(4, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
    for epoch in range(3):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


main()
''', "DDP003", ("return torch.randn(8, 4).cuda()",)),
    # A helper called by the training after the setup: set_device made the rank's GPU the
    # current one, so `.cuda(0)` becomes `.cuda()`, GPU 0 no more.
    Emits('''\
import torch
from torch.utils.data import DataLoader, TensorDataset


def train_step(model, optimizer, x, y):
    loss = torch.nn.functional.mse_loss(model(x.cuda(0)), y.cuda(0))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = torch.nn.Linear(4, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
    for epoch in range(3):
        for x, y in loader:
            train_step(model, optimizer, x, y)


main()
''', "DDP002", ("model(x.cuda())",)),
    # A bare .cuda() that runs only while training is the current GPU, the rank's own by then.
    Silent('''\
import torch
from torch.utils.data import DataLoader, TensorDataset


def train_step(model, optimizer, x, y):
    loss = torch.nn.functional.mse_loss(model(x.cuda()), y.cuda())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = torch.nn.Linear(4, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
    for epoch in range(3):
        for x, y in loader:
            train_step(model, optimizer, x, y)


main()
''', "DDP003"),
    Emits('import os\nos.environ["CUDA_VISIBLE_DEVICES"] = "0"\n' + TRAINING, "DDP004",
          ('os.environ["CUDA_VISIBLE_DEVICES"] = "0"',)),
    Silent(TRAINING, "DDP004"),
    Emits(TRAINING.replace("dataset = TensorDataset", 'pin = device == "cuda"\ndataset = TensorDataset'),
          "DDP008", ('pin = device.type == "cuda"',)),
    Silent(TRAINING.replace("device = torch.device(\"cuda\" if torch.cuda.is_available() else \"cpu\")",
                            "device = torch.accelerator.current_accelerator()"), "DDP006"),
)
