"""The wrap and the optimizer: each module handed to DDP is one an optimizer of the script steps
(DDP932). A teacher, a target network, an EMA copy or a perceptual-loss network that no
optimizer trains must stay unwrapped: where it runs with gradients on and its output is
detached (a teacher's logits), DDP waits for gradients that never come and the next forward
raises ("Expected to have finished reduction in the prior iteration"); frozen, DDP refuses it
when it is built.

The reading is conservative: it speaks only where every optimizer of the file is a torch
optimizer whose parameters it can follow to names (`model.parameters()`, param groups,
`filter(lambda p: p.requires_grad, ...)`, `itertools.chain(G.parameters(), D.parameters())`,
a list built from them), and where the wrapped module is not handed to code outside this
file, which could build the optimizer that trains it."""
import ast
from collections.abc import Iterator
from typing import Optional

from ddpify import ast_walk
from ddpify.selfcheck.models import DDP_WRAPPERS, Finding, wraps
from ddpify.selfcheck.source import Source, dotted, last_part, parameter_names

# Methods that hand out a module's parameters to whoever builds an optimizer.
_PARAMETER_METHODS = frozenset({"parameters", "named_parameters"})
# Calls that may take the wrapped module without training it elsewhere: builtins, torch, and
# the calls ddpify writes itself (`getattr(model, "module", model)`).
_HARMLESS_PREFIXES = ("torch.", "copy.", "builtins.", "math.", "itertools.")
_HARMLESS_NAMES = frozenset({"print", "getattr", "isinstance", "hasattr", "len", "type", "id", "str", "repr",
                             "sum", "any", "all", "list", "tuple", "zip", "DDP", "DistributedDataParallel"})
# Calls a copy is made by: the copy is another module (an EMA, a target network), not an alias.
_COPIES = frozenset({"deepcopy", "AveragedModel"})


def untrained_wraps(migrated: Source) -> Iterator[Finding]:
    """DDP932: `DDP(x)` where the optimizers of the file are all in sight and none steps a
    parameter of `x` (of `x` itself, a part of it, a module it is built from, or a name bound
    to it)."""
    optimizers = [call for call in migrated.calls if _is_optimizer(migrated, call)]
    if not optimizers or _parameters_handed_elsewhere(migrated, optimizers):
        return
    roots: set[str] = set()
    for optimizer in optimizers:
        found = _parameter_roots(migrated, optimizer)
        if found is None:
            return  # an optimizer over something this reading cannot follow: say nothing
        roots |= found
    for model, call in wraps(migrated):
        # FSDP2 shards the blocks of the trained model one by one: each is a part, not a module apart.
        if last_part(call.func) not in DDP_WRAPPERS or _handed_out(migrated, model):
            continue
        related = _related_names(migrated, model)
        if any(root in related or any(root.startswith(f"{name}.") for name in related) for root in roots):
            continue
        yield ("DDP932", call.lineno,
               f"`{model}` is wrapped, but no optimizer of the script steps its parameters (they step "
               f"{', '.join(sorted(f'`{root}`' for root in roots)) or 'nothing named'}): a module that does not "
               f"train (a teacher, a target network, an EMA copy, a loss network) must stay unwrapped")


# Calls that read parameters without stepping them: a count, a list, a clip, a chain handed on.
_READERS = frozenset({"sum", "len", "list", "tuple", "set", "filter", "map", "zip", "enumerate", "sorted", "any",
                      "all", "print", "next", "iter", "chain", "clip_grad_norm_", "clip_grad_value_",
                      "parameters_to_vector", "numel", "dict", "OrderedDict"})


def _parameters_handed_elsewhere(source: Source, optimizers: list[ast.Call]) -> bool:
    """Parameters handed to a call that is not a torch optimizer and not a mere reader (an
    optimizer of another library, `ExponentialMovingAverage(model.parameters())`): what steps
    them is out of this reading's sight, so it judges no wrap."""
    inside_optimizers = {id(node) for optimizer in optimizers for node in ast_walk.walk(optimizer)}
    for call in source.calls:
        if id(call) in inside_optimizers or last_part(call.func) in _READERS:
            continue
        if any(isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
               and node.func.attr in _PARAMETER_METHODS
               for argument in [*call.args, *(keyword.value for keyword in call.keywords)]
               for node in ast_walk.walk(argument)):
            return True
    return False


def _is_optimizer(source: Source, call: ast.Call) -> bool:
    """A torch optimizer's construction, or `optimizer.add_param_group({"params": ...})`."""
    if isinstance(call.func, ast.Attribute) and call.func.attr == "add_param_group":
        return True
    name = source.qualified(call.func) or ""
    return name.startswith("torch.optim.") and not name.startswith(("torch.optim.lr_scheduler.",
                                                                    "torch.optim.swa_utils."))


def _parameter_roots(source: Source, optimizer: ast.Call) -> Optional[set[str]]:
    """The names whose parameters the optimizer steps (`model` for `model.parameters()`,
    `model.head` for `model.head.parameters()`), or None where its parameters come from
    something this reading cannot follow: a helper's result, a name never bound here, a
    parameter of its function or a loop variable (`for m in modules: SGD(m.parameters())`)."""
    handed = optimizer.args[:1] + [keyword.value for keyword in optimizer.keywords if keyword.arg == "params"]
    if not handed:
        return None
    roots: set[str] = set()
    for value in handed:
        found = _roots_of(source, value, set())
        if found is None:
            return None
        roots |= found
    return roots


def _handed_or_looped(source: Source, node: ast.AST) -> set[str]:
    """The parameters of the functions around `node` (but `self`) and the loop variables."""
    names: set[str] = set()
    for ancestor in source.ancestors(node):
        if isinstance(ancestor, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            names |= parameter_names(ancestor) - {"self"}
        elif isinstance(ancestor, (ast.For, ast.AsyncFor, ast.comprehension)):
            names |= {name.id for name in ast_walk.walk(ancestor.target) if isinstance(name, ast.Name)}
    return names


def _roots_of(source: Source, value: ast.AST, seen: set[str]) -> Optional[set[str]]:
    """The names a parameter expression draws from, following names bound in the file; None
    where it cannot tell, an empty set for nothing."""
    roots: set[str] = set()
    # `[p for m in modules for p in m.parameters()]`: `m` is each module of a collection.
    looped = {name.id for node in ast_walk.walk(value) if isinstance(node, ast.comprehension)
              for name in ast_walk.walk(node.target) if isinstance(name, ast.Name)}
    for node in ast_walk.walk(value):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in _PARAMETER_METHODS:
            owner = _module_name(node.func.value)
            # A loop variable or a function's parameter (`params += list(m.parameters())` in `for m
            # in models:`) names a module this reading does not follow.
            if owner is None or owner.split(".", 1)[0] in looped | _handed_or_looped(source, node):
                return None
            roots.add(owner)
    if roots:
        return roots
    # `params` built beforehand: follow the names it reads.
    for node in ast_walk.walk(value):
        if isinstance(node, ast.Call):
            return None  # a call that is not `.parameters()`: a helper building the groups
        name = dotted(node) if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load) else None
        if name is None or name in seen:
            continue
        seen.add(name)
        found = _roots_of_name(source, name, seen)
        if found is None:
            return None
        roots |= found
    return roots


def _roots_of_name(source: Source, name: str, seen: set[str]) -> Optional[set[str]]:
    """The roots of what `name` is bound to; None where it is bound where this reading does
    not look, or filled some other way (`decay = []`, appended to through a conditional)."""
    roots: set[str] = set()
    for bound_value in _bound_values(source, name):
        found = _roots_of(source, bound_value, seen)
        if found is None:
            return None
        roots |= found
    return roots or None


def _bound_values(source: Source, name: str) -> list[ast.AST]:
    """What `name` is assigned, extended with or appended to anywhere in the file."""
    values: list[ast.AST] = []
    for node in source.nodes:
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(dotted(target) == name for target in targets):
                values.append(node.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("append", "extend", "add_param_group") and dotted(node.func.value) == name:
            values.extend(node.args)
    return values


def _related_names(source: Source, model: str) -> set[str]:
    """`model` and the names bound to it or it to them: `model = net.to(device)` in either
    direction, and the modules it is built from (`model = nn.Sequential(backbone, head)`,
    whose `head` an optimizer may step), but not copies of it (`ema = copy.deepcopy(model)`)."""
    related = {model}
    changed = True
    while changed:
        changed = False
        for node in source.assignments:
            if not isinstance(node, ast.Assign) or _is_copy(node.value):
                continue
            targets = {name for target in node.targets for name in _target_names(target)}
            alias = _alias_of(node.value)
            built_from = {alias} if alias is not None else _built_from(node.value)
            if targets & related and not built_from <= related:
                related |= built_from
                changed = True
            elif alias in related and not targets <= related:
                related |= targets
                changed = True
    return related


# Methods that hand back the module they are called on (moved, cast, switched to a mode).
_SELF_RETURNING = frozenset({"to", "cuda", "cpu", "half", "float", "double", "bfloat16", "train", "eval",
                             "requires_grad_", "type", "to_empty"})


def _alias_of(value: ast.AST) -> Optional[str]:
    """`net` for `net`, `net.to(device)`, `net.cuda().eval()`, `net.module` and
    `getattr(net, "module", net)`: the same module under another name; also `net.cuda() if
    use_cuda else net`, where both arms are that module."""
    if isinstance(value, ast.IfExp):
        body = _alias_of(value.body)
        return body if body == _alias_of(value.orelse) else None
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in _SELF_RETURNING:
        value = value.func.value
    return _module_name(value)


def _module_name(value: ast.AST) -> Optional[str]:
    """The dotted name of a module, read through DDP's `.module` either way it is written."""
    if isinstance(value, ast.Call) and dotted(value.func) == "getattr" and len(value.args) == 3:
        value = value.args[0]
    name = dotted(value) if isinstance(value, (ast.Name, ast.Attribute)) else None
    return name.removesuffix(".module") if name is not None else None


def _built_from(value: ast.AST) -> set[str]:
    """The named modules a construction is handed (`nn.Sequential(backbone, head)`,
    `nn.ModuleList([encoder, decoder])`, `Net(...).to(device)`: none)."""
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in _SELF_RETURNING:
        value = value.func.value
    if not isinstance(value, ast.Call):
        return set()
    handed: list[ast.AST] = [*value.args, *(keyword.value for keyword in value.keywords)]
    handed += [element for argument in handed if isinstance(argument, (ast.List, ast.Tuple))
               for element in argument.elts]
    return {name for name in (_alias_of(argument) for argument in handed) if name is not None}


def _target_names(target: ast.AST) -> set[str]:
    if isinstance(target, (ast.Tuple, ast.List)):
        return {name for element in target.elts for name in _target_names(element)}
    name = dotted(target)
    return {name} if name is not None else set()


def _is_copy(value: ast.AST) -> bool:
    return isinstance(value, ast.Call) and (dotted(value.func) or "").rsplit(".", 1)[-1] in _COPIES


def _handed_out(source: Source, model: str) -> bool:
    """`model` is handed to a call of code outside this file (a Trainer, a library's fit),
    which may build the optimizer that trains it."""
    own = set(source.functions) | {node.name for node in source.nodes if isinstance(node, ast.ClassDef)}
    for call in source.calls:
        arguments = [*call.args, *(keyword.value for keyword in call.keywords)]
        if not any(dotted(argument) == model for argument in arguments):
            continue
        callee = dotted(call.func) or ""
        qualified = source.qualified(call.func) or callee
        if callee.rsplit(".", 1)[-1] in own or callee in _HARMLESS_NAMES \
                or qualified.startswith(_HARMLESS_PREFIXES):
            continue
        return True
    return False
