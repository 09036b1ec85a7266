"""In a script ddpify placed on the GPU, no tensor is made without a device where the model meets
the batches (DDP949).

Rule (conservative, stdlib `ast` only, a reading separate from rules/gpu_placement.py): the passes
the placement moved are the `for` loops of the output whose body starts by moving something with
`.to(device...)`; their bodies, the functions of the file they call by name (and those functions'
calls, in turn), and every method but `__init__` of the file's classes built on a Module may not
call a torch factory (`torch.zeros`, `torch.arange`, `torch.tensor`, ...) without `device=`, unless
the tensor becomes a parameter or a buffer. Such a tensor stays on the CPU and meets the rank's
GPU batches: "Expected all tensors to be on the same device" on the first GPU, nothing on a CPU.
"""
import ast
from collections.abc import Callable, Iterator

from ddpify.diagnostics import Diagnostic, rule_of
from ddpify.selfcheck.source import dotted

FACTORIES = frozenset({
    "zeros", "ones", "empty", "full", "rand", "randn", "randint", "randperm", "arange", "linspace", "logspace",
    "eye", "tensor", "as_tensor", "from_numpy", "Tensor", "FloatTensor", "LongTensor", "IntTensor",
    "BoolTensor", "DoubleTensor", "ByteTensor", "HalfTensor", "normal",
})
KEEPERS = frozenset({"Parameter", "register_buffer", "register_parameter"})


def placed_factories_check(placed: str, migrated: str) -> list[Diagnostic]:
    """DDP949 findings at the lines of `placed` (the script as placed, before the migration)."""
    return findings_at_the_placed_lines("DDP949", factories_on_the_placed_path, placed, migrated)


def findings_at_the_placed_lines(code: str, find: Callable[[ast.Module], Iterator[tuple[int, str]]],
                                 placed: str, migrated: str) -> list[Diagnostic]:
    """A self-check of the placement's output (`find` gives lines of `migrated` and details),
    reported at the lines of `placed`, the script as placed before the migration."""
    from ddpify.selfcheck import _line_map  # the package imports this module's check late
    to_placed = _line_map(placed, migrated)
    return [Diagnostic(code, to_placed(line), 1, f"{rule_of(code).summary} (output line {line}): {detail}")
            for line, detail in find(ast.parse(migrated))]


def factories_on_the_placed_path(tree: ast.Module) -> Iterator[tuple[int, str]]:
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    parts: list[ast.AST] = [statement for node in ast.walk(tree) if isinstance(node, ast.For) and _moves_first(node)
                            for statement in node.body]
    parts += [method for node in tree.body if isinstance(node, ast.ClassDef)
              and any((dotted(base) or "").endswith("Module") for base in node.bases)
              for method in node.body if isinstance(method, ast.FunctionDef) and method.name != "__init__"]
    seen: set[str] = set()
    pending = list(parts)
    while pending:
        for node in ast.walk(pending.pop()):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in functions \
                    and node.func.id not in seen:
                seen.add(node.func.id)
                parts.append(functions[node.func.id])
                pending.append(functions[node.func.id])
    kept = {id(argument) for part in parts for node in ast.walk(part) if isinstance(node, ast.Call)
            and (dotted(node.func) or "").rpartition(".")[2] in KEEPERS for argument in ast.walk(node)}
    found = set()
    for part in parts:
        for node in ast.walk(part):
            if not isinstance(node, ast.Call):
                continue
            name = dotted(node.func)
            if name is not None and name.startswith("torch.") and name.count(".") == 1 \
                    and name[6:] in FACTORIES and not any(k.arg == "device" for k in node.keywords) \
                    and id(node) not in kept:
                found.add((node.lineno, f"`{name}(...)` makes a tensor on the CPU where the model meets the "
                                        "placed batches"))
    yield from sorted(found)


def _moves_first(loop: ast.For) -> bool:
    """The loop's first statements move what it draws: `x, y = x.to(device), y.to(device)`."""
    for statement in loop.body[:2]:
        if isinstance(statement, ast.Assign) and any(
                isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "to"
                and any(isinstance(a, ast.Name) and a.id == "device" for a in node.args)
                for node in ast.walk(statement.value)):
            return True
    return False
