"""A model trained through its own methods runs them as the wrapper's forward (DDP131).

DDP shares the gradients of a backward only when a forward through the wrapper armed it. A
model trained as `mu, logvar = model.encode(x)` then `model.decode(z)`, or as `loss =
model.training_loss(x)`, and never called itself with gradients on, reaches the raw module:
each rank would step on its own gradients and drift apart without an error. Each such call
in a training loop runs through the wrapper instead: `forward_through_ddp(model, "encode", x)`
has DDP run `model.module.encode(x)` as its forward, which arms the gradient sharing as
`model(x)` would, and is `model.encode(x)` itself where the model is not wrapped (plain
`python`). Several such calls before one backward make one step, which DDP allows as long as
each parameter gets its gradient once, as it does for the original's single step. The module
keeps its own keys (the wrapper holds the model itself), so checkpoints are unchanged.

Routed only where every training call of the model is such a method call on a name that
holds it, in a training loop: a ModuleDict's entries (`nets["dec"](x)`) or a layer loop
(`for layer in model`) are not methods of it, and stay DDP903.
"""

import libcst as cst

from ddpify.analysis import figures, names
from ddpify.analysis.containers import module_looped_over
from ddpify.analysis.control import Facts
from ddpify.analysis.facts import Model
from ddpify.analysis.nodes import calls_within, dotted_name, self_attributes, self_reads
from ddpify.diagnostics import Rule, Severity
from ddpify.emit.edits import Edits
from ddpify.rules.cases import Emits, Silent

RULES = (
    Rule("DDP131", Severity.EDIT, "the model's own methods that train it run as the wrapper's forward",
         "The model trains through its other methods (`model.encode(x)`, `model.training_loss(x)`) and "
         "is never called itself: DDP shares gradients only for a forward through the wrapper, so each "
         "such call runs as DDP's forward (`forward_through_ddp(model, \"encode\", x)`), and is the "
         "method itself where the model is not wrapped.",
         "Nothing to do; or route the calls through the model's forward yourself."),
    Rule("DDP132", Severity.EDIT, "submodules the model's training methods never reach: DDP told to expect "
         "unused parameters",
         "The model trains through its own methods (`loss = model.training_step(batch)`), and a submodule "
         "built in __init__ is read only by its other methods (`self.aux_head` in validation_step): it gets no "
         "gradient at any step, and DDP, waiting for every gradient, would fail at the second step, so the "
         "wrap passes find_unused_parameters=True.",
         "Nothing to do; or build that submodule outside the trained model, then drop "
         "find_unused_parameters=True."),
)

HELPER_NAME = "forward_through_ddp"

HELPER_CODE = '''\
def forward_through_ddp(model, method, *args, **kwargs):
    """`model.<method>(*args, **kwargs)` run as the DDP wrapper's forward, so that DDP shares
    the gradients it leads to (a method of the module itself would train each rank's copy
    alone); the method itself where the model is not wrapped."""
    if not isinstance(model, DDP):
        return getattr(model, method)(*args, **kwargs)
    module = model.module

    def run(*run_args, **run_kwargs):
        del module.forward  # the module's own forward again, for the method's calls of it
        return getattr(module, method)(*run_args, **run_kwargs)

    module.forward = run  # what DDP's forward calls, this once
    try:
        return model(*args, **kwargs)
    finally:
        module.__dict__.pop("forward", None)
'''

# Methods that train nothing, or are the wrapper's own (`model.forward(x)` is DDP's forward).
_NOT_ROUTED = names.NOT_FORWARD | {"forward"}


def training_method_calls(facts: Facts, model: Model) -> list[cst.Call]:
    """Rule: the calls, in the training loops, of the model's own methods with gradients on
    (`model.encode(x)`, `self.model.decode(z)`), where no call of the model itself runs with
    gradients on, nothing hands the model to a training helper, and every training call
    that reaches the model is such a method call; otherwise none (DDP903 says why)."""
    holders = {name for _, name in facts.model_holders(model)}
    if handed_to_a_training_helper(facts, holders) or any(called_with_gradients(facts, name) for name in holders):
        return []
    routed: list[cst.Call] = []
    for loop in sorted(facts.training_loops, key=facts.start_of):
        for call in calls_within(loop.body):
            func = call.func
            if isinstance(func, cst.Attribute) and func.attr.value in _NOT_ROUTED \
                    or figures.under_no_grad(facts, call):
                continue
            if isinstance(func, cst.Attribute) and dotted_name(func.value) in holders:
                if call not in routed:
                    routed.append(call)
            elif _reaches_the_model_otherwise(facts, call, holders):
                return []
    return routed


def _reaches_the_model_otherwise(facts: Facts, call: cst.Call, holders: set[str]) -> bool:
    func = call.func
    if isinstance(func, cst.Subscript):
        return dotted_name(func.value) in holders
    if isinstance(func, cst.Name):
        return module_looped_over(facts.parents, call, func.value) in holders
    return False


def handed_to_a_training_helper(facts: Facts, holders: set[str]) -> bool:
    """A name holding the model goes to a function of another module that trains: that
    function may call the model itself."""
    return any(dotted_name(arg.value) in holders for call in facts.training_helper_calls for arg in call.args)


def called_with_gradients(facts: Facts, holder: str) -> bool:
    """Whether some call through the wrapper held by this name (`model(x)`, `model.forward(x)`)
    runs with gradients on."""
    calls = [*facts.calls_by_callee.get(holder, ()), *facts.calls_by_callee.get(f"{holder}.forward", ())]
    return any(not figures.under_no_grad(facts, call) for call in calls)


def route(facts: Facts, edits: Edits, model: Model) -> bool:
    """Each training method call through forward_through_ddp; whether there were any."""
    calls = training_method_calls(facts, model)
    for call in calls:
        edits.expressions[call] = _through_the_wrapper
        edits.report("DDP131", call)
    if calls:
        edits.add_helper(HELPER_NAME, HELPER_CODE, "DDP")
    return bool(calls)


def _through_the_wrapper(node: cst.CSTNode) -> cst.CSTNode:
    call = node if isinstance(node, cst.Call) else None
    if call is None or not isinstance(call.func, cst.Attribute):
        return node
    comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    first = [cst.Arg(value=call.func.value, comma=comma),
             cst.Arg(value=cst.SimpleString(f'"{call.func.attr.value}"'), comma=comma if call.args else
                     cst.MaybeSentinel.DEFAULT)]
    return call.with_changes(func=cst.Name(HELPER_NAME), args=[*first, *call.args])


def routed_methods(facts: Facts, model: Model) -> set[cst.CSTNode]:
    """The `model.encode` of each routed call: its holder stays the wrapper, never unwrapped."""
    return {call.func for call in training_method_calls(facts, model)}


_VAE = '''\
import torch
from torch.utils.data import DataLoader, TensorDataset


class VAE(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = torch.nn.Linear(4, 4)
        self.dec = torch.nn.Linear(2, 4)

    def encode(self, x):
        h = self.enc(x)
        return h[:, :2], h[:, 2:]

    def decode(self, z):
        return self.dec(z)


device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = VAE().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=8, shuffle=True)
for epoch in range(2):
    for (x,) in loader:
        x = x.to(device)
        mu, logvar = model.encode(x)
        recon = model.decode(mu + torch.randn_like(mu) * (0.5 * logvar).exp())
        loss = torch.nn.functional.mse_loss(recon, x)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
'''

_WITH_A_CRITIC = _VAE.replace(
    "        self.dec = torch.nn.Linear(2, 4)\n",
    "        self.dec = torch.nn.Linear(2, 4)\n        self.critic = torch.nn.Linear(4, 1)\n").replace(
    "    def decode(self, z):", "    def score(self, x):\n        return self.critic(x)\n\n    def decode(self, z):")

CASES = (
    Emits(_VAE, "DDP131", ('forward_through_ddp(model, "encode", x)', 'forward_through_ddp(model, "decode", ')),
    # Called itself with gradients on: the wrapper's forward arms the sharing already.
    Silent(_VAE.replace("mu, logvar = model.encode(x)", "mu, logvar = model(x)"), "DDP131"),
    # A head only a method the training never calls reads: no gradient at any step.
    Emits(_WITH_A_CRITIC, "DDP132", ("find_unused_parameters=True",)),
    Silent(_VAE, "DDP132"),
)


def parts_left_out_of_training(facts: Facts, model: Model) -> list[str]:
    """Rule: a model trained through its own methods (`loss = model.training_step(batch)`)
    gives gradients only to the submodules those methods reach: the methods routed through
    the wrapper, the methods they call on `self`, and forward where they call `self(x)`. A
    submodule built in `__init__` and read only by the other methods (an auxiliary head in
    `validation_step`) gets none at any step, and DDP, waiting for every gradient, fails at
    the second step: the wrap passes find_unused_parameters=True (DDP132 names them)."""
    routed = {call.func.attr.value for call in training_method_calls(facts, model)
              if isinstance(call.func, cst.Attribute)}
    if not routed:
        return []
    methods = _methods_of_the_model_class(facts, model)
    reached: set[str] = set()
    waiting = [name for name in routed if name in methods]
    while waiting:
        name = waiting.pop()
        if name in reached:
            continue
        reached.add(name)
        for call in calls_within(methods[name].body):
            called = dotted_name(call.func) or ""
            if called == "self" and "forward" in methods:
                waiting.append("forward")
            elif called.startswith("self.") and called.count(".") == 1 and called[5:] in methods:
                waiting.append(called[5:])
    if "__init__" not in methods or not reached:
        return []
    used = {attribute for name in reached for attribute, _ in self_reads(methods[name])}
    return [attribute for attribute, assign in self_attributes(methods["__init__"])
            if assign is not None and attribute not in used and _builds_parameters(facts, assign)]


def _methods_of_the_model_class(facts: Facts, model: Model) -> dict[str, cst.FunctionDef]:
    """The methods of the class the model is built from and of its bases in this file (the
    subclass's first), found as the statements that build the model name the class."""
    statements = facts.statements_touching.get(model.name, ())
    code = " ".join(facts.module.code_for_node(statement) for statement in statements)
    built = [name for name in facts.classes if f"{name}(" in code]
    if len(built) != 1:
        return {}
    methods: dict[str, cst.FunctionDef] = {}
    pending = built
    while pending:
        klass = facts.classes.get(pending.pop(0))
        if klass is None:
            continue
        for method in klass.body.body:
            if isinstance(method, cst.FunctionDef):
                methods.setdefault(method.name.value, method)
        pending.extend(dotted_name(base.value) or "" for base in klass.bases)
    return methods


def _builds_parameters(facts: Facts, assign: cst.Assign) -> bool:
    """`self.aux_head = nn.Linear(...)` (a torch.nn layer with parameters) or a module class of
    this file."""
    if not isinstance(assign.value, cst.Call):
        return False
    callee = dotted_name(assign.value.func) or ""
    if callee in facts.classes:
        return True
    layer = callee.rsplit(".", 1)[-1]
    return callee.startswith(("nn.", "torch.nn.")) and f"torch.nn.{layer}" not in names.PARAMETERLESS_LAYERS \
        and not layer.endswith("Loss")
