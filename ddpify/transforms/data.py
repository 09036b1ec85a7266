"""DistributedSampler for training loaders and set_epoch in their epoch loop (DDP2xx).

As a group of one the sampler is None and the loader shuffles exactly as before, so plain
`python` reproduces the original's numbers; under torchrun the sampler shards and shuffles.
"""
from typing import Optional

import libcst as cst

from ddpify.analysis import Facts, Loader, dotted_name
from ddpify.transforms.edits import Edits, Insertion
from ddpify.transforms.setup import SetupPlan

SAMPLER_CODE = "{sampler} = DistributedSampler({dataset}, shuffle={shuffle}) if distributed else None\n"
SET_EPOCH_CODE = "if {sampler} is not None:\n    {sampler}.set_epoch({epoch})\n"
SET_EPOCH_VIA_LOADER_CODE = (
    "if isinstance({loader}.sampler, DistributedSampler):\n    {loader}.sampler.set_epoch({epoch})\n"
)
LINE_LENGTH = 88


def plan(facts: Facts, edits: Edits, setup: SetupPlan) -> None:
    for loader in facts.loaders:
        if "batch_sampler" in loader.keywords:
            edits.report("DDP204", loader.call)
        elif "sampler" in loader.keywords:
            edits.report("DDP207", loader.call)
        elif not loader.shuffles:
            edits.report("DDP203", loader.call)
        elif not setup.sees_setup(facts, loader.call) or not _simple(loader.dataset):
            edits.report("DDP201", loader.call,
                         "could not add a DistributedSampler here: shard this loader by hand")
        else:
            _add_sampler(facts, edits, loader)


def _simple(dataset: Optional[cst.BaseExpression]) -> bool:
    return dataset is not None and dotted_name(dataset) is not None


def sampler_name(loader: Loader, taken) -> str:
    base = loader.name.rsplit(".", 1)[-1]
    prefix = loader.name[: len(loader.name) - len(base)]
    if base.endswith("loader"):
        stem = base[: -len("loader")]
        candidate = stem + "sampler" if stem in ("", ) or stem.endswith("_") else stem + "_sampler"
    else:
        candidate = base + "_sampler"
    name = prefix + candidate
    while name in taken:
        name += "_"
    return name


def _add_sampler(facts: Facts, edits: Edits, loader: Loader) -> None:
    sampler = sampler_name(loader, facts.bound_names)
    shuffle_value = edits.code(loader.keywords["shuffle"].value)
    edits.before.setdefault(loader.statement, []).append(Insertion(
        [edits.statement(SAMPLER_CODE.format(
            sampler=sampler, dataset=edits.code(loader.dataset), shuffle=shuffle_value))],
        takes_comments=True,
    ))
    edits.imports.add("DistributedSampler")
    loader_shuffle = f"{sampler} is None" if shuffle_value == "True" else f"{shuffle_value} and {sampler} is None"
    edits.replaced[loader.statement] = [_loader_statement(facts, edits, loader, sampler, loader_shuffle)]
    edits.report("DDP201", loader.call)
    edits.report("DDP206", loader.call)
    _set_epoch(facts, edits, loader, sampler)


def _loader_statement(facts: Facts, edits: Edits, loader: Loader, sampler: str, shuffle: str):
    """The loader with `shuffle=` handed to the sampler and `sampler=` after it."""
    args = []
    for arg in loader.call.args:
        args.append(edits.code(arg.with_changes(comma=cst.MaybeSentinel.DEFAULT)).strip())
        if arg.keyword is not None and arg.keyword.value == "shuffle":
            args[-1] = f"shuffle={shuffle}"
            args.append(f"sampler={sampler}")
    statement = loader.statement
    head = edits.code(statement.body[0].targets[0].target) + " = " + edits.code(loader.call.func)
    indent = " " * (facts.positions[statement].start.column)
    one_line = f"{head}({', '.join(args)})"
    if "\n" not in one_line and len(indent) + len(one_line) <= LINE_LENGTH:
        code = one_line
    elif len(indent) + 4 + len(", ".join(args)) <= LINE_LENGTH:
        code = f"{head}(\n    {', '.join(args)}\n)"
    else:
        code = f"{head}(\n" + "".join(f"    {arg},\n" for arg in args) + ")"
    trailing = statement.trailing_whitespace
    return edits.statement(code + "\n").with_changes(
        leading_lines=statement.leading_lines, trailing_whitespace=trailing
    )


def _set_epoch(facts: Facts, edits: Edits, loader: Loader, sampler: str) -> None:
    """At the top of the epoch loop: the loop around the pass over the loader, which may sit
    in another function than the loader (`for epoch ...: train(model, train_loader)`)."""
    for epoch_loop, name_there in facts.epoch_loops(loader.name, loader.function):
        if not isinstance(epoch_loop.target, cst.Name):
            continue
        epoch = epoch_loop.target.value
        if sampler.startswith("self.") or facts.function_of(epoch_loop) is loader.function:
            code = SET_EPOCH_CODE.format(sampler=sampler, epoch=epoch)
        else:
            # The sampler variable is not in scope here; the loader still carries it.
            code = SET_EPOCH_VIA_LOADER_CODE.format(loader=name_there, epoch=epoch)
        first = epoch_loop.body.body[0]
        edits.before.setdefault(first, []).append(Insertion(edits.statements(code)))
        edits.report("DDP202", epoch_loop)
        return
