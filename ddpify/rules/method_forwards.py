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
from typing import Optional

import libcst as cst

from ddpify.analysis import figures, names
from ddpify.analysis.containers import module_looped_over
from ddpify.analysis.control import Facts
from ddpify.analysis.facts import Model
from ddpify.analysis.nodes import calls_within, dotted_name
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
    if any(dotted_name(arg.value) in holders for call in facts.training_helper_calls for arg in call.args):
        return []
    if any(_called_with_gradients(facts, name) for name in holders):
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


def _called_with_gradients(facts: Facts, holder: str) -> bool:
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


def routed_method(facts: Facts, model: Model, access: cst.Attribute) -> Optional[cst.Call]:
    """The routed call whose method `access` names, if any: its holder stays the wrapper."""
    return next((call for call in training_method_calls(facts, model) if call.func is access), None)


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

CASES = (
    Emits(_VAE, "DDP131", ('forward_through_ddp(model, "encode", x)', 'forward_through_ddp(model, "decode", ')),
    # Called itself with gradients on: the wrapper's forward arms the sharing already.
    Silent(_VAE.replace("mu, logvar = model.encode(x)", "mu, logvar = model(x)"), "DDP131"),
)
