"""What a CPU run under Gloo takes and NCCL on a GPU machine refuses (DDP956, DDP957).

Rule (stdlib `ast` only, conservative, a reading separate from the emitters):

* DDP956: in a file whose process group may be NCCL alone (an `init_process_group` that does
  not name Gloo for CPU tensors: `"nccl" if cuda else "gloo"`, `get_default_backend_for_device`;
  a file that joins no group itself is read as one), a tensor collective (`dist.all_reduce`,
  `broadcast`, `all_gather`, `reduce`, ...) is handed a tensor a torch factory made without a
  device (`torch.tensor([total])`, `torch.zeros(1)`), or with `device="cpu"` written out, and
  never moved: directly, or through a name whose every binding in that function is such a
  factory. Under Gloo the sum runs; under NCCL every rank raises "No backend type associated
  with device type cpu". A group that names Gloo (`"gloo"`, `"cpu:gloo,cuda:nccl"`) takes it.
* DDP957: a `torch.load` of the output without map_location (by keyword, as its second
  argument, or in `**options`): on a GPU machine every rank restores what was saved on
  `cuda:0` onto `cuda:0`, which each rank's own GPU then meets (or one GPU holds N copies).
"""
import ast
from collections.abc import Iterator
from typing import Optional

from ddpify.selfcheck.placed_factories import FACTORIES
from ddpify.selfcheck.source import FUNCTIONS, Source, dotted

Finding = tuple[str, int, str]

TENSOR_COLLECTIVES = frozenset({"all_reduce", "reduce", "broadcast", "all_gather", "all_gather_into_tensor",
                                "reduce_scatter", "reduce_scatter_tensor", "gather", "scatter", "all_to_all",
                                "all_to_all_single"})
LOADS = frozenset({"torch.load"})


def cpu_tensors_in_collectives(migrated: Source) -> Iterator[Finding]:
    if _gloo_takes_cpu_tensors(migrated):
        return
    for call in migrated.calls:
        name = migrated.qualified(call.func) or ""
        if name.rpartition(".")[2] not in TENSOR_COLLECTIVES or not name.startswith(("torch.distributed.", "dist.")):
            continue
        for argument in [*call.args[:2], *(keyword.value for keyword in call.keywords
                                           if keyword.arg in ("tensor", "tensor_list", "output", "input"))]:
            made = _made_on_the_cpu(migrated, call, argument)
            if made is not None:
                yield ("DDP956", call.lineno,
                       f"`{ast.unparse(call)}` is handed `{made}`, a tensor made on the CPU: NCCL takes only "
                       "tensors on the rank's GPU")


def loads_without_map_location(migrated: Source) -> Iterator[Finding]:
    for call in migrated.calls:
        if migrated.qualified(call.func) not in LOADS:
            continue
        positional = [argument for argument in call.args if not isinstance(argument, ast.Starred)]
        if len(positional) >= 2 or len(positional) < len(call.args) or any(
                keyword.arg in (None, "map_location") for keyword in call.keywords):
            continue
        yield ("DDP957", call.lineno, f"`{ast.unparse(call)}` restores each tensor on the device it was saved from")


def _gloo_takes_cpu_tensors(migrated: Source) -> bool:
    """Every group the file joins has Gloo for CPU tensors (its backend names gloo on a GPU
    machine too: `"gloo"`, `"cpu:gloo,cuda:nccl" if cuda else "gloo"`); a file that joins none
    (a helper module) is not known to."""
    joins = [call for call in migrated.calls if (dotted(call.func) or "").endswith("init_process_group")]
    return bool(joins) and all(_names_gloo_for_the_gpu_machine(join) for join in joins)


def _names_gloo_for_the_gpu_machine(join: ast.Call) -> bool:
    backend = join.args[0] if join.args else next(
        (keyword.value for keyword in join.keywords if keyword.arg == "backend"), None)
    if isinstance(backend, ast.Constant) and isinstance(backend.value, str):
        return "gloo" in backend.value
    if isinstance(backend, ast.IfExp):  # `"cpu:gloo,cuda:nccl" if cuda else "gloo"`: the GPU branch
        return _names_gloo_for_the_gpu_machine(ast.Call(func=join.func, args=[backend.body], keywords=[]))
    return False


def _made_on_the_cpu(migrated: Source, call: ast.Call, argument: ast.expr) -> Optional[str]:
    """The factory that made `argument` on the CPU: the argument itself, the element of a list
    or comprehension (all_gather's outputs), or the value of every binding of its name in the
    function of the call."""
    if not isinstance(argument, ast.Name):
        return _cpu_factory_in(argument)
    scope = migrated.scope_of(call)
    if scope is not migrated.tree and argument.id in _parameters(scope):
        return None
    values = [statement.value for statement in migrated.statements_in(scope)
              if isinstance(statement, ast.Assign)
              and any(isinstance(target, ast.Name) and target.id == argument.id for target in statement.targets)]
    made = [_cpu_factory_in(value) for value in values]
    return made[0] if made and all(made) else None


def _cpu_factory_in(value: ast.expr) -> Optional[str]:
    """`torch.zeros(1)`, or the element of `[torch.zeros(1), ...]` or `[torch.zeros(1) for _ in ...]`."""
    if isinstance(value, (ast.List, ast.Tuple)) and value.elts:
        value = value.elts[0]
    if isinstance(value, ast.ListComp):
        value = value.elt
    return ast.unparse(value) if isinstance(value, ast.Call) and _cpu_factory(value) else None


def _parameters(function: ast.AST) -> set[str]:
    assert isinstance(function, FUNCTIONS)
    arguments = function.args
    return {a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]}


def _cpu_factory(call: ast.Call) -> bool:
    """`torch.tensor([x])`, `torch.zeros(1, dtype=...)`, `torch.tensor(x, device="cpu")`: not
    moved afterwards (`torch.tensor(x).to(device)` is an Attribute call, not this)."""
    name = dotted(call.func)
    if name is None or not name.startswith("torch.") or name.count(".") != 1 or name[6:] not in FACTORIES:
        return False
    device = next((keyword.value for keyword in call.keywords if keyword.arg == "device"), None)
    if device is None:
        return True
    return isinstance(device, ast.Constant) and device.value == "cpu"
