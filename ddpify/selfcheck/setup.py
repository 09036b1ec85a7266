"""The setup block keeps the module importable (DDP914), the device its type (DDP915), and
comes before the samplers and wraps that ask whether it ran (DDP917); no device names the
script's own GPU index once the group is joined (DDP924)."""
import ast
from collections.abc import Iterator
from typing import Optional, cast

from ddpify import ast_walk
from ddpify.selfcheck.models import DDP_WRAPPERS, _on_every_path_to
from ddpify.selfcheck.source import FUNCTIONS, Source, assigned_targets, dotted, last_part

Finding = tuple[str, int, str]

DEVICE_PREFIXES = ("cuda", "cpu", "mps", "xpu", "hpu", "npu", "meta")


def _has_main_block(source: Source) -> bool:
    return any(isinstance(statement, ast.If) and _mentions_running(statement.test, set())
               for statement in source.tree.body)


def _mentions_running(test: ast.AST, run_flags: set[str]) -> bool:
    """`__name__ == "__main__"`, or a flag that includes it (ddpify's
    `distributed = "WORLD_SIZE" in os.environ and __name__ == "__main__"`)."""
    return any(isinstance(node, ast.Name) and (node.id == "__name__" or node.id in run_flags)
               for node in ast_walk.walk(test))


def _flags_of_running(source: Source) -> set[str]:
    return {name for statement in source.tree.body if isinstance(statement, ast.Assign)
            and _mentions_running(statement.value, set()) for name in assigned_targets(statement)}


def joins_on_import(original: Source, migrated: Source) -> Iterator[Finding]:
    """A script with a `__main__` block was importable; init_process_group (or a function of
    the file that calls it) must not run at import."""
    if not _has_main_block(original):
        return
    run_flags = _flags_of_running(migrated)
    joining = _joining_functions(migrated)
    for call in migrated.calls:
        if not isinstance(migrated.scope_of(call), ast.Module):
            continue
        if any(isinstance(node, ast.If) and _mentions_running(node.test, run_flags)
               for node in migrated.ancestors(call)):
            continue
        if last_part(call.func) == "init_process_group" or dotted(call.func) in joining:
            yield "DDP914", call.lineno, f"`{ast.unparse(call.func)}(...)` runs when the module is imported"


def asked_before_the_group(source: Source) -> Iterator[Finding]:
    """`DistributedSampler(ds) if dist.is_initialized() else None` must run where the group is
    already joined under torchrun, or every rank trains on the whole dataset: a call that joins
    it (init_process_group, or a function or class of the file that calls it) comes first in
    the sampler's scope, or in that of every call of the sampler's function. A function the
    file never calls may run after the setup, and passes."""
    joining = _joining_functions(source)
    for call in source.calls:
        parent = source.parents.get(call)
        if (last_part(call.func) == "DistributedSampler" and isinstance(parent, ast.IfExp)
                and parent.body is call and _asks_initialized(parent.test)
                and not _joined_before(source, call, joining, frozenset())):
            yield ("DDP917", call.lineno,
                   "`dist.is_initialized()` is False here under torchrun: the group is joined later")
        elif (last_part(call.func) in DDP_WRAPPERS and _wrapped_once_initialized(source, call)
                and not _joined_before(source, call, joining, frozenset())):
            # `if dist.is_initialized(): self.net = DDP(self.net)` above the join: no rank
            # wraps, and each trains its own copy without an error.
            yield ("DDP917", call.lineno,
                   "`dist.is_initialized()` is False here under torchrun: the group is joined later, "
                   "so the model is never wrapped")


def _wrapped_once_initialized(source: Source, call: ast.Call) -> bool:
    """The wrap sits in the body of an `if` that asks whether the group exists."""
    child: ast.AST = call
    for ancestor in source.ancestors(call):
        if isinstance(ancestor, ast.If) and _asks_initialized(ancestor.test) and child in ancestor.body:
            return True
        child = ancestor
    return False


def _asks_initialized(test: ast.AST) -> bool:
    return any(isinstance(node, ast.Call) and last_part(node.func) == "is_initialized" for node in ast_walk.walk(test))


def _joined_before(source: Source, node: ast.AST, joining: set[str], seen: frozenset) -> bool:
    scope = source.scope_of(node)
    position = (node.lineno, node.col_offset)  # type: ignore[attr-defined]
    if any(((call.lineno, call.col_offset) < position or _argument_of(call, node))
           and (last_part(call.func) == "init_process_group" or dotted(call.func) in joining)
           for call in source.calls_in(scope)):
        return True
    if isinstance(scope, ast.Module):
        return False
    key = source.function_key(scope)
    if key in seen:
        return False
    sites = [call for call in source.calls if dotted(call.func) in (key, f"self.{key}")
             and not _run_of_a_module_that_never_joins(source, call, joining)]
    return all(_joined_before(source, site, joining, seen | {key}) for site in sites)


def _run_of_a_module_that_never_joins(source: Source, call: ast.Call, joining: set[str]) -> bool:
    """The call sits in the `__main__` block of a file that joins no group anywhere (a
    helper module's demo, `loader, dataset = get_loader(...)` then a pass printing shapes):
    that run is `python data.py` on its own, where no group exists and asking
    `dist.is_initialized()` rightly answers False. The training joins in the script that
    imports the function, before it calls it."""
    if joining or any(last_part(each.func) == "init_process_group" for each in source.calls):
        return False
    return any(isinstance(node, ast.If) and _mentions_running(node.test, set()) for node in source.ancestors(call))


def _argument_of(call: ast.Call, node: ast.AST) -> bool:
    """`call` sits in the arguments of `node`, a call: Python runs it before `node`'s callee
    (`main(get_config())`, where get_config joins the group, runs main's body after the join)."""
    if not isinstance(node, ast.Call):
        return False
    return any(inner is call for argument in [*node.args, *(keyword.value for keyword in node.keywords)]
               for inner in ast_walk.walk(argument))


def _joining_functions(source: Source) -> set[str]:
    """Names of the file's functions that call init_process_group, directly or through another."""
    joining: set[str] = set()
    grew = True
    while grew:
        grew = False
        for name, functions in source.functions.items():
            if name in joining:
                continue
            if any(last_part(call.func) == "init_process_group" or dotted(call.func) in joining
                   for function in functions for call in source.calls_in(function)):
                joining.add(name)
                grew = True
    return joining


def device_types_changed(original: Source, migrated: Source) -> Iterator[Finding]:
    """A name the original binds to a device string (`"cuda" if ... else "cpu"`) and reads as
    a string (`device.startswith(...)`, `device_type=device`, `device == "cuda"`) is not
    rebound to a torch.device in the same function of the output. Where every use takes a
    torch.device as well (`.to(device)`, `map_location=device`, f-strings) the new type is
    harmless, and the check stays quiet."""
    strings = _bindings(original, _is_device_string)
    devices_before = _bindings(original, _is_torch_device)
    for key, statements in _bindings(migrated, _is_torch_device).items():
        if key in strings and key not in devices_before:
            read_as_string = _string_use(migrated, key)
            if read_as_string is not None:
                yield ("DDP915", statements[0].lineno,
                       f"`{key[1]}` was a string in the original and becomes a torch.device here, "
                       f"but output line {read_as_string.lineno} reads it as a string")


_STRING_METHODS = frozenset(name for name in dir(str) if not name.startswith("_"))


def _string_use(source: Source, key) -> Optional[ast.expr]:
    """The first read of the name that only a string supports: in its own function, or for a
    module-level name in any function that does not bind one of its own (`self.device`: anywhere)."""
    scope_path, name = key
    for node in source.nodes:
        parent = source.parents.get(node)
        if dotted(node) != name or parent is None or isinstance(getattr(node, "ctx", None), ast.Store):
            continue
        if "." not in name and not _same_variable(source, node, name, scope_path):
            continue
        if isinstance(node, ast.expr) and _reads_as_string(node, parent):
            return node
    return None


def _same_variable(source: Source, node: ast.AST, name: str, scope_path: tuple) -> bool:
    if scope_path:
        return _scope_path(source, node) == scope_path
    scope = source.scope_of(node)
    return isinstance(scope, ast.Module) or not _binds(scope, name)


def _binds(function: ast.AST, name: str) -> bool:
    """Whether a function has a parameter or a local variable `name` (not a global one)."""
    assert isinstance(function, FUNCTIONS)
    arguments = function.args
    parameters = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                  *filter(None, [arguments.vararg, arguments.kwarg])]
    if any(parameter.arg == name for parameter in parameters):
        return True
    return any(isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store)
               for node in ast_walk.walk(function))


def _reads_as_string(node: ast.AST, parent: ast.AST) -> bool:
    if isinstance(parent, ast.Attribute):
        return parent.attr in _STRING_METHODS
    if isinstance(parent, ast.keyword):
        return parent.arg == "device_type"
    if isinstance(parent, ast.Compare):
        return any(isinstance(side, ast.Constant) and isinstance(side.value, str)
                   for side in [parent.left, *parent.comparators])
    if isinstance(parent, ast.BinOp):
        return isinstance(parent.op, ast.Add)
    if isinstance(parent, ast.Subscript):
        return parent.value is node
    return False


def _scope_path(source: Source, node: ast.AST) -> tuple:
    return tuple(reversed([ancestor.name for ancestor in source.ancestors(node) if isinstance(ancestor, FUNCTIONS)]))


def _bindings(source: Source, matches) -> dict:
    """(function path, name) -> the assignments of a value `matches` accepts."""
    found: dict = {}
    for node in source.assignments:
        if node.value is not None and matches(node.value):
            for name in assigned_targets(node):
                found.setdefault((_scope_path(source, node), name), []).append(node)
    return found


def _is_device_string(value: ast.AST) -> bool:
    if isinstance(value, ast.IfExp):
        return _is_device_string(value.body) and _is_device_string(value.orelse)
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        return value.value.startswith(DEVICE_PREFIXES)
    if isinstance(value, ast.JoinedStr) and value.values:
        first = value.values[0]
        return isinstance(first, ast.Constant) and str(first.value).startswith(DEVICE_PREFIXES)
    return False


def _is_torch_device(value: ast.AST) -> bool:
    if isinstance(value, ast.IfExp):
        return _is_torch_device(value.body) or _is_torch_device(value.orelse)
    return isinstance(value, ast.Call) and dotted(value.func) == "torch.device"


def gpu_indices_left(original: Source, migrated: Source) -> Iterator[Finding]:
    """The script's own GPU index (what the original hands `.cuda(X)` or
    `torch.cuda.set_device(X)`: `args.gpu`, `gpu_ids[0]`) names one GPU for every rank; in an
    output that joins a group, no device may still be made of it: `.to(X)`, `.cuda(X)`,
    `device=X`, `torch.device("cuda", X)`, `f"cuda:{X}"`, `"cuda:{}".format(X)`,
    `"cuda:%d" % X`. One under a test of the environment (`... if "WORLD_SIZE" in os.environ
    else f"cuda:{X}"`) is plain `python`'s own and passes."""
    if not any(last_part(call.func) == "init_process_group" for call in migrated.calls):
        return
    for call, literal in _literal_gpu_indices(migrated):
        if not _under_an_environment_test(migrated, call) and not _refined_to_the_rank(migrated, call):
            yield "DDP924", call.lineno, f"`{ast.unparse(call)}` names GPU {literal} on every rank"
    modules = {(alias.asname or alias.name).split(".")[0] for node in original.nodes
               if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}
    indices = {ast.unparse(call.args[0]) for call in original.calls if call.args
               and (isinstance(call.func, ast.Attribute) and call.func.attr == "cuda"
                    and not (isinstance(call.func.value, ast.Name) and call.func.value.id in modules)
                    or dotted(call.func) in ("torch.cuda.set_device", "cuda.set_device"))
               and isinstance(call.args[0], (ast.Name, ast.Attribute, ast.Subscript))
               and "device" not in ast.unparse(call.args[0]).rsplit(".", 1)[-1]}
    indices |= _names_bound_to_an_index(migrated)
    if not indices:
        return
    for node, index in _devices_of_an_index(migrated, indices):
        if not _under_an_environment_test(migrated, node):
            yield "DDP924", node.lineno, f"`{ast.unparse(node)}` names GPU `{index}` on every rank"


def allocated_before_the_device_is_set(migrated: Source) -> Iterator[Finding]:
    """DDP924 for a legacy CUDA tensor type called (`Tensor(n, 1)`, `FloatTensor(np.zeros(...))`,
    `x.type(Tensor)`, where `Tensor = torch.cuda.FloatTensor if cuda else ...`) in the scope
    that makes this rank's GPU the current one, above that set_device: it allocates on the
    current GPU, GPU 0 on every rank until then."""
    setting = [call for call in migrated.calls if last_part(call.func) in ("set_device", "set_device_index")]
    if not setting:
        return
    typed = {name for statement in migrated.assignments for name in assigned_targets(statement)
             if statement.value is not None and _names_a_cuda_tensor_type(statement.value)}
    for call in migrated.calls:
        argument = call.args[0] if call.args else None
        allocates = dotted(call.func) in typed or _names_a_cuda_tensor_type(call.func) or (
            last_part(call.func) == "type" and argument is not None
            and (dotted(argument) in typed or _names_a_cuda_tensor_type(argument)))
        if not allocates:
            continue
        scope = migrated.scope_of(call)
        later = [each for each in setting if migrated.scope_of(each) is scope and each.lineno > call.lineno]
        if later and not any(migrated.scope_of(each) is scope and each.lineno < call.lineno for each in setting):
            yield ("DDP924", call.lineno, f"`{ast.unparse(call)}` allocates on the current GPU before "
                   f"output line {later[0].lineno} makes this rank's GPU the current one: GPU 0 on every rank")


def _names_a_cuda_tensor_type(value: ast.expr) -> bool:
    if isinstance(value, ast.IfExp):
        return _names_a_cuda_tensor_type(value.body) or _names_a_cuda_tensor_type(value.orelse)
    name = dotted(value) or ""
    return name.startswith("torch.cuda.") and name.endswith("Tensor")


def _names_bound_to_an_index(source: Source) -> set[str]:
    """`gpu = 0`: names whose every assignment in the script is an integer literal, and that no
    function takes as a parameter; `.to(gpu)` then names GPU 0 on every rank, as `.to(0)` does."""
    values: dict[str, list[ast.expr]] = {}
    for statement in source.assignments:
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        for target in targets:
            if isinstance(target, ast.Name) and statement.value is not None:
                values.setdefault(target.id, []).append(statement.value)
    parameters = {argument.arg for functions in source.functions.values() for function in functions
                  if isinstance(function, FUNCTIONS)
                  for argument in [*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs]}
    return {name for name, assigned in values.items() if name not in parameters and all(
        isinstance(value, ast.Constant) and type(value.value) is int for value in assigned)}


def _under_an_environment_test(source: Source, node: ast.AST) -> bool:
    return any(isinstance(parent, (ast.IfExp, ast.If)) and "WORLD_SIZE" in ast.unparse(parent.test)
               for parent in source.ancestors(node))


def _refined_to_the_rank(source: Source, node: ast.AST) -> bool:
    """`device = torch.device("cuda", 1)`, the script's choice kept as written, then made
    this rank's by the setup below it (`device = torch.device(device.type, local_rank)`):
    a later assignment of the same name, in the same scope, from the rank's index."""
    statement = source.statement_of(node)
    names = assigned_targets(statement)
    if not names:
        return False
    return any(other.lineno > statement.lineno and set(names) & set(assigned_targets(other))
               and "local_rank" in ast.unparse(getattr(other, "value", None) or other)
               for other in source.statements_in(source.scope_of(statement)) if isinstance(other, ast.Assign))


def _literal_gpu_indices(source: Source) -> Iterator[tuple[ast.Call, int]]:
    """A GPU named by a literal index, the same on every rank: `.cuda(1)`, `.to(0)`,
    `.cuda(device=1)`, `.to(device=1)`, `device=1` (`torch.zeros(3, device=1)`),
    `torch.device(1)`, `torch.device("cuda", 1)`."""
    def literal(node: Optional[ast.AST]) -> Optional[int]:
        is_index = isinstance(node, ast.Constant) and type(node.value) is int
        return cast(int, cast(ast.Constant, node).value) if is_index else None

    for call in source.calls:
        method = call.func.attr if isinstance(call.func, ast.Attribute) else None
        keywords = {keyword.arg: keyword.value for keyword in call.keywords if keyword.arg is not None}
        found = literal(keywords.get("device"))
        if method in ("to", "cuda") and call.args:
            found = literal(call.args[0]) if found is None else found
        if dotted(call.func) == "torch.device" and call.args:
            last = call.args[-1]
            if len(call.args) == 1 or isinstance(call.args[0], ast.Constant) and call.args[0].value == "cuda":
                found = literal(last) if found is None else found
        if found is not None:
            yield call, found


def _devices_of_an_index(source: Source, indices: set[str]) -> Iterator[tuple[ast.expr, str]]:
    def index_in(node: Optional[ast.AST]) -> Optional[str]:
        if isinstance(node, ast.IfExp):  # `gpu if use_gpu else "cpu"`: either arm
            return index_in(node.body) or index_in(node.orelse)
        code = ast.unparse(node) if node is not None else None
        return code if code in indices else None

    for call in source.calls:
        method = last_part(call.func) if isinstance(call.func, ast.Attribute) else None
        first = call.args[0] if call.args else None
        found = index_in(first) if method in ("to", "cuda") else None
        if method == "format" and isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Constant) \
                and call.func.value.value in ("cuda:{}", "cuda:{0}"):
            found = index_in(first)
        if dotted(call.func) == "torch.device" and len(call.args) == 2:
            found = index_in(call.args[1])
        found = found or next((index_in(keyword.value) for keyword in call.keywords
                               if keyword.arg == "device" and index_in(keyword.value)), None)
        if found:
            yield call, found
    for node in ast_walk.walk(source.tree):
        if isinstance(node, ast.JoinedStr) and len(node.values) == 2 and isinstance(node.values[0], ast.Constant) \
                and node.values[0].value == "cuda:" and isinstance(node.values[1], ast.FormattedValue):
            found = index_in(node.values[1].value)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant) \
                and node.left.value in ("cuda:%d", "cuda:%s", "cuda:%i"):
            found = index_in(node.right)
        else:
            continue
        if found:
            yield node, found


def joined_twice(original: Source, migrated: Source) -> Iterator[Finding]:
    """Rule (DDP933): two `init_process_group` calls of one scope on one path, the later one
    not under a test, made after the earlier join, that the group is not joined yet (`if not
    dist.is_initialized():`; one test around both was asked before either):
    torch raises "trying to initialize the default process group twice" on every rank.
    Where the original itself calls it twice, the pattern is the user's."""
    if sum(last_part(call.func) == "init_process_group" for call in original.calls) > 1:
        return
    joins = [call for call in migrated.calls if last_part(call.func) == "init_process_group"]
    for index, later in enumerate(joins):
        for earlier in joins[:index]:
            first, second = migrated.statement_of(earlier), migrated.statement_of(later)
            if migrated.scope_of(earlier) is migrated.scope_of(later) and first is not second \
                    and not _asks_whether_joined(migrated, later, earlier) \
                    and _on_every_path_to(migrated, first, second):
                yield ("DDP933", later.lineno, f"the process group is joined again here, after output line "
                       f"{earlier.lineno} on the same path, with no `if not dist.is_initialized():` before it")
                break


def _asks_whether_joined(source: Source, call: ast.Call, earlier: ast.Call) -> bool:
    """Whether a test of `dist.is_initialized()` around `call` runs after the earlier join (a
    test around both was asked once, before either)."""
    around_earlier = set(source.ancestors(earlier))
    return any(isinstance(ancestor, (ast.If, ast.IfExp, ast.While)) and ancestor not in around_earlier and any(
        last_part(node.func) == "is_initialized" for node in ast_walk.walk(ancestor.test) if isinstance(node, ast.Call))
        for ancestor in source.ancestors(call))
