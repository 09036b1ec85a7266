"""Batches handed to an object that ddpify cannot follow (DDP937): the training may be in
there, so a file where ddpify finds none is not known to train nothing."""
from typing import Optional

import libcst as cst

from ddpify.analysis.control import Facts
from ddpify.analysis.names import trains_by_look
from ddpify.analysis.nodes import dotted_name, find_all, names_within

# Calls whose result is no object of the project's: torch's, and Python's own.
_KNOWN_MAKERS = ("torch.", "torchvision.", "builtins.", "numpy.", "collections.", "itertools.", "functools.")


def batches_to_an_unfollowed_object(facts: Facts) -> Optional[tuple[cst.Call, str, str]]:
    """Rule: `model = get_model(opt)` (a factory of another module that picks a class by name
    from a dict, a registry, or `getattr`), then `for images, labels in train_loader:
    model.set_input(images, labels); model.optimize_parameters()`: a training loader of this
    file hands its batches to a method of an object made by a call ddpify cannot read. The
    steps may run in there; with none found, the file is not one that trains nothing (DDP901).
    (the call that takes the batch, the loader's name, the call that made the object), or None.
    Only a loader built here that looks like training data (its name, its shuffle), iterated by a
    `for` of this file whose targets go, by name, into the arguments of a method of a plain
    name bound in the same function to the result of a call that is not torch's or Python's."""
    qualified = {id(call): name for name, calls in facts.calls_named.items() for call in calls}
    for loader in facts.loaders:
        if loader.inline is not None or not trains_by_look(loader.name, loader.shuffles):
            continue
        for loop in facts.loops_over.get(loader.name, ()):
            if facts.function_of(loop) is not loader.function:
                continue
            batch = set(names_within(loop.target))
            for call in find_all(loop.body, cst.Call, into_functions=False):
                receiver = call.func.value if isinstance(call.func, cst.Attribute) else None
                if not isinstance(receiver, cst.Name) or not any(
                        batch & set(names_within(arg.value)) for arg in call.args):
                    continue
                made = _made_by(facts, receiver.value, loader.function, qualified)
                if made is not None:
                    return call, loader.name, made
    return None


def _made_by(facts: Facts, name: str, function: Optional[cst.FunctionDef], qualified: dict[int, str]
             ) -> Optional[str]:
    """The call that makes the object `name` holds in `function`, when every binding there is
    one call, and that call is neither torch's nor Python's (nor a class of this file)."""
    values = [value for value in facts.assigned_values.get(name, ()) if facts.function_of(value) is function]
    if len(values) != 1 or not isinstance(values[0], cst.Call):
        return None
    call = values[0]
    callee = qualified.get(id(call)) or dotted_name(call.func) or ""
    if not callee or callee.startswith(_KNOWN_MAKERS) or callee in facts.functions or callee in facts.classes:
        return None
    return dotted_name(call.func)
