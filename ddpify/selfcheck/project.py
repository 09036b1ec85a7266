"""The self-check over a migrated project (`ddpify train.py -o OUT_DIR/`): each file is checked
on its own (ddpify.selfcheck.check), which cannot see that the entry joins the process group
while the optimizer steps in another module and no module of the run wraps the model. Each
rank then trains its own copy, and the run must not exit 0 (DDP911)."""
import ast
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Optional

from ddpify import ast_walk
from ddpify.selfcheck.capped_shares import capped_share_measured_in_another_module
from ddpify.selfcheck.models import WRAPPERS
from ddpify.selfcheck.shared_figures import share_measured_in_another_module
from ddpify.selfcheck.source import Source, dotted, last_part

# Sharding done some other way (FSDP1, a framework's own launcher) counts as a wrap.
OTHER_WRAPPERS = ("FSDP", "FullyShardedDataParallel")
FRAMEWORKS = ("accelerate", "lightning", "pytorch_lightning", "deepspeed", "ignite", "colossalai")
# The migration said that the model stays unwrapped (DDP903) or the file single-process (DDP904).
REPORTED = ("DDP903", "DDP904")
# The migration said why no epoch is set: no epoch loop found (DDP211), a loader passed over
# once (DDP220), a file left as it was (already distributed, DDP900), or the training left in
# one process (DDP904), where no process group is joined and no sampler is made; or this
# check's own twin in a file (DDP912) said it already.
NO_EPOCH_REPORTED = ("DDP211", "DDP220", "DDP900", "DDP904", "DDP912")


@dataclass(frozen=True)
class Module:
    path: str  # as shown
    text: str  # the migrated code (the original where the run left the file as it was)
    codes: frozenset  # the codes the migration reported for it
    original: str = ""  # the file before the run


def unwrapped_training(modules: Sequence[Module]) -> Optional[tuple[str, int, str]]:
    """(path, line, message) of an optimizer step in a project that the run made join a process
    group (a project distributed by its own hand, DDP900, is not the run's doing) but where no
    module wraps a model, or None."""
    if any(module.codes & frozenset(REPORTED) for module in modules):
        return None
    sources = [(module, source) for module in modules if (source := _source(module.text)) is not None]
    if not any(_joins(source) > _joins(_source(module.original)) for module, source in sources):
        return None
    if any(_distributes(source) for _, source in sources):
        return None
    for module, source in sources:
        if not any(last_part(call.func) == "backward" for call in source.calls):
            continue
        step = next((call for call in source.calls if _optimizer_step(call)), None)
        if step is not None:
            return (module.path, step.lineno,
                    f"`{ast.unparse(step)}` steps an optimizer in a project that joins a process group, "
                    "but no module of the run wraps a model in DDP: each rank trains its own copy; "
                    "wrap the model in DDP (`model = DDP(model, device_ids=[local_rank])`) after its "
                    "move and before this optimizer is built")
    return None


def samplers_never_given_an_epoch(modules: Sequence[Module]) -> Optional[tuple[str, int, str]]:
    """(path, line, message) of a shuffling DistributedSampler that the run added to a module
    of the project when no module of the run adds a `set_epoch` call, and none says why, or
    None. Each file's own check lets a sampler pass whose loader is returned or handed on (its
    epoch is set where it goes); this is where it goes: nowhere in the project, so every epoch
    repeats the first one's order on every rank."""
    if any(module.codes & frozenset(NO_EPOCH_REPORTED) for module in modules):
        return None
    added_sampler: Optional[tuple[str, ast.Call]] = None
    for module in modules:
        source, original = _source(module.text), _source(module.original)
        if source is None:
            return None
        if _epoch_setters(source) > _epoch_setters(original):
            return None
        shuffling = [call for call in source.calls if last_part(call.func) == "DistributedSampler"
                     and not any(keyword.arg == "shuffle" and isinstance(keyword.value, ast.Constant)
                                 and keyword.value.value is False for keyword in call.keywords)]
        before = 0 if original is None else sum(last_part(call.func) == "DistributedSampler" for call in original.calls)
        if added_sampler is None and len(shuffling) > before:
            added_sampler = (module.path, shuffling[0])
    if added_sampler is None:
        return None
    path, call = added_sampler
    return (path, call.lineno,
            "this shuffling DistributedSampler never gets set_epoch(epoch) in any module of the project: "
            "every epoch repeats the first one's order; call `loader.sampler.set_epoch(epoch)` at the top "
            "of the loop that runs the epochs")


def _epoch_setters(source: Optional[Source]) -> int:
    return 0 if source is None else sum(last_part(call.func) == "set_epoch" for call in source.calls)


def _source(text: str) -> Optional[Source]:
    try:
        return Source(text)
    except (SyntaxError, ValueError):
        return None


def _joins(source: Optional[Source]) -> int:
    return 0 if source is None else sum(last_part(call.func) == "init_process_group" for call in source.calls)


def _distributes(source: Source) -> bool:
    if any(last_part(call.func) in (*WRAPPERS, *OTHER_WRAPPERS) for call in source.calls):
        return True
    for node in ast_walk.walk(source.tree):
        names: Iterable[str] = ()
        if isinstance(node, ast.Import):
            names = (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = (node.module,)
        if any(name.split(".", 1)[0] in FRAMEWORKS for name in names):
            return True
    return False


def _optimizer_step(call: ast.Call) -> bool:
    """`optimizer.step()`, `self.opt.step()`, `scaler.step(optimizer)`; not a scheduler's step."""
    if last_part(call.func) != "step" or not isinstance(call.func, ast.Attribute):
        return False
    return "sched" not in (dotted(call.func.value) or "").lower()


def capped_shares_measured_elsewhere(modules: Sequence[Module]) -> Optional[tuple[str, int, str]]:
    """(path, line, message) of a loop in one module that measures the first batches of a loader
    another module gave a DistributedSampler and handed to it, with nothing gathering them
    (capped_shares, DDP953), unless the migration reported such a pass (DDP213)."""
    if any("DDP213" in module.codes for module in modules):
        return None
    sources = [(module.path, source) for module in modules if (source := _source(module.text)) is not None]
    return capped_share_measured_in_another_module(sources)


def shares_measured_elsewhere(modules: Sequence[Module]) -> Optional[tuple[str, int, str]]:
    """(path, line, message) of a loop in one module that adds up figures over a loader another
    module gave a DistributedSampler and handed to it, with nothing gathering them
    (shared_figures, DDP943), unless the migration reported such a pass (DDP213)."""
    if any("DDP213" in module.codes for module in modules):
        return None
    sources = [(module.path, source) for module in modules if (source := _source(module.text)) is not None]
    return share_measured_in_another_module(sources)
