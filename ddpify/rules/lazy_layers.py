"""Models built with lazy layers (`nn.LazyLinear`, `nn.LazyConv2d`...), whose parameters exist
only after a first forward (DDP117).

DDP refuses a module with uninitialized parameters when it is built ("Modules with
uninitialized parameters can't be used with `DistributedDataParallel`. Run a dummy forward
pass to correctly initialize the modules"), on every backend, so a wrap right after the move
fails on every rank. The dummy forward needs an input of the model's shape, which only the
user knows: the model's rule (rules/model.py) asks this module before it writes the wrap, and
leaves the model unwrapped and reported when a lazy layer is there (in this file, or in the
__init__ of a class of another module of the project) and no forward runs before the wrap's place.
"""
from typing import Optional

import libcst as cst

from ddpify.analysis.control import Facts
from ddpify.analysis.facts import Model, Statement
from ddpify.analysis.nodes import dotted_name, find_all
from ddpify.diagnostics import Rule, Severity
from ddpify.emit.edits import Edits
from ddpify.rules.cases import TRAINING, Emits, Silent

RULES = (
    Rule("DDP117", Severity.WARNING, "the model has lazy layers: DDP cannot wrap it before a first forward",
         "A lazy layer (`nn.LazyLinear`, `nn.LazyConv2d`, ...) makes its parameters at its first "
         "forward. DDP refuses a module with uninitialized parameters when it is built, so a wrap "
         "where the model reaches its device fails on every rank. The dummy forward that makes "
         "them needs an input of the model's shape, which ddpify cannot know: the model is left "
         "unwrapped and reported.",
         "Run one forward on a batch of the right shape before the wrap (`with torch.no_grad(): "
         "model(example)`), then wrap it: `model = DDP(model, device_ids=[local_rank])`."),
)

LAZY_PREFIX = "torch.nn.Lazy"


def reported_lazy(facts: Facts, edits: Edits, model: Model, anchor: Statement) -> bool:
    """Rule: the model's value is built with a torch.nn lazy layer, in its own expression
    (`nn.Sequential(..., nn.LazyLinear(1))`) or in a class of this file it calls, and no
    forward of the model runs in its function before the wrap's place (`model(example)`
    materializes the parameters). Then DDP117 at the anchor, and no wrap. True when reported."""
    lazy = _lazy_layer_named(facts, model)
    if lazy is None or _run_before(facts, model, anchor):
        return False
    edits.report("DDP117", anchor, f"`{model.name}` is built with {lazy}, whose parameters exist only after a "
                 f"first forward: DDP refuses it; "
                 f"after this line, where it reaches its device, run one forward on an example batch, then "
                 f"wrap `{model.name}` in DDP")
    return True


def _lazy_layer_named(facts: Facts, model: Model) -> Optional[str]:
    """How the report names the model's lazy layer: `nn.LazyLinear` (line 10) in this file, or
    `LazyLinear` in the class `Critic` of another module of the project; None without one."""
    lazy_calls = [call for qualified, calls in facts.calls_named.items()
                  if qualified.startswith(LAZY_PREFIX) for call in calls]
    found = _lazy_layer_of(facts, model, lazy_calls) if lazy_calls else None
    if found is not None:
        return f"`{facts.module.code_for_node(found.func)}` (line {facts.line_of(found)})"
    if not facts.lazy_project_classes:
        return None
    for value in [value for _, name in facts.model_holders(model) for value in facts.assigned_values.get(name, ())]:
        for call in find_all(value, cst.Call):
            called = dotted_name(call.func)
            if called in facts.lazy_project_classes:
                layer = facts.lazy_project_classes[called].rsplit(".", 1)[-1]
                return f"`{layer}` in the class `{called}` of its module"
    return None


def _lazy_layer_of(facts: Facts, model: Model, lazy_calls: list[cst.Call]) -> Optional[cst.Call]:
    classes = {statement.name.value: statement for statement in facts.module.body
               if isinstance(statement, cst.ClassDef)}
    values = [value for _, name in facts.model_holders(model) for value in facts.assigned_values.get(name, ())]
    for value in values:
        scopes: list[cst.CSTNode] = [value]
        called = {dotted_name(call.func) for call in find_all(value, cst.Call)}
        scopes += [classes[name] for name in called if name in classes]
        for call in lazy_calls:
            if any(_inside(facts, call, scope) for scope in scopes):
                return call
    return None


def _inside(facts: Facts, node: cst.CSTNode, scope: cst.CSTNode) -> bool:
    current: Optional[cst.CSTNode] = node
    while current is not None:
        if current is scope:
            return True
        current = facts.parents.get(current)
    return False


def after_the_first_forward(facts: Facts, model: Model, anchor: Statement) -> Statement:
    """Rule: a model with lazy layers that the script runs once before training (`model(example)`
    a few lines after it is built and moved, in the same block) is wrapped after that forward,
    which made its parameters: the statement of the forward, else the anchor as it was."""
    if _lazy_layer_named(facts, model) is None:
        return anchor
    block = facts.block_of(anchor)
    following = list(block.body)[list(block.body).index(anchor) + 1:]
    for statement in following:
        if facts.training_calls and any(_inside(facts, call, statement) for call in facts.training_calls):
            break  # the training itself: too late
        if isinstance(statement, (cst.SimpleStatementLine, cst.BaseCompoundStatement)) and any(
                dotted_name(call.func) == model.name for call in find_all(statement, cst.Call)):
            return statement
    return anchor


def _run_before(facts: Facts, model: Model, anchor: Statement) -> bool:
    """A call of the model itself (`model(example)`) in its function before the wrap's place."""
    statements = [anchor, *facts.statements_touching.get(model.name, ())]
    return any(dotted_name(call.func) == model.name and facts.function_of(call) is model.function
               and facts.start_of(call) < facts.end_of(anchor)
               for statement in statements for call in find_all(statement, cst.Call))


CASES = (
    Emits(TRAINING.replace("torch.nn.Linear(4, 1).to(device)",
                           "torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LazyLinear(1)).to(device)"), "DDP117"),
    # A dummy forward after the move has made the parameters: the wrap follows it.
    Silent(TRAINING.replace("torch.nn.Linear(4, 1).to(device)\n",
                            "torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LazyLinear(1)).to(device)\n"
                            "model(torch.zeros(1, 4, device=device))\n"), "DDP117"),
)
