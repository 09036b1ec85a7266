"""Safe mode (ddpify/selfcheck): each property is shown to hold on a correct output and to
fail on that output with its defect planted.

Every fixture's expected output passing the self-check is shown by tests/test_fixtures.py:
migrate_source runs the self-check, so a DDP91x on a fixture would change its diagnostics.
"""
import re
from pathlib import Path

import pytest

from ddpify.api import MigrationError, migrate_source
from ddpify.diagnostics import Diagnostic
from ddpify.options import Options
from ddpify.selfcheck import check

SHAPES = Path(__file__).resolve().parent / "data" / "selfcheck_shapes"

ORIGINAL = '''import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

device = "cuda" if torch.cuda.is_available() else "cpu"
if device.startswith("cuda"):
    torch.backends.cudnn.benchmark = True
torch.manual_seed(0)
dataset = TensorDataset(torch.randn(64, 10), torch.randint(0, 2, (64,)))
loader = DataLoader(dataset, batch_size=8, shuffle=True)
model = nn.Linear(10, 2)
model.to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: {loss.item():.4f}")
    torch.save(model.state_dict(), "model.pt")
'''

# ORIGINAL migrated as the contract asks (the string device stays a string).
MIGRATED = '''import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

device = "cuda" if torch.cuda.is_available() else "cpu"
# Distributed setup: one process per device under torchrun; plain `python` runs as before.
distributed = "WORLD_SIZE" in os.environ
local_rank = int(os.environ.get("LOCAL_RANK", 0))
if distributed:
    if device != "cpu":
        device = f"{device}:{local_rank}"
    dist.init_process_group("nccl" if device != "cpu" else "gloo")
is_main = not distributed or dist.get_rank() == 0
if device.startswith("cuda"):
    torch.backends.cudnn.benchmark = True
torch.manual_seed(0)
dataset = TensorDataset(torch.randn(64, 10), torch.randint(0, 2, (64,)))
sampler = DistributedSampler(dataset, shuffle=True) if distributed else None
loader = DataLoader(dataset, batch_size=8, shuffle=sampler is None, sampler=sampler)
model = nn.Linear(10, 2)
model.to(device)
if distributed:
    model = DDP(model, device_ids=[local_rank] if device.startswith("cuda") else None)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    if sampler is not None:
        sampler.set_epoch(epoch)
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    if is_main:
        print(f"epoch {epoch}: {loss.item():.4f}")
        torch.save(getattr(model, "module", model).state_dict(), "model.pt")

if distributed:
    dist.destroy_process_group()
'''

WRAP = 'if distributed:\n    model = DDP(model, device_ids=[local_rank] if device.startswith("cuda") else None)\n'


def planted(old, new, text=MIGRATED):
    assert old in text, "the correct output changed: plant the defect anew"
    return text.replace(old, new, 1)


def codes(original, migrated, diagnostics=(), unbound_names=False):
    """The codes found; DDP919 (a name nothing binds) only when asked, since most tests
    plant a statement in the output alone, whose names the original never binds."""
    return [d.code for d in check(original, migrated, diagnostics)
            if unbound_names or d.code != "DDP919"]


def test_the_correct_output_passes():
    assert check(ORIGINAL, MIGRATED, []) == []


def test_a_name_the_output_reads_and_nothing_binds_is_found():
    """`map_location=device` written where the setup named no device: NameError on every rank.
    A name the original already read unbound (a `from x import *` is the user's) is not ours."""
    migrated = planted("model.to(device)", "model.to(rank_device)", MIGRATED)
    assert codes(ORIGINAL, migrated, unbound_names=True) == ["DDP919"]
    assert codes(ORIGINAL, MIGRATED, unbound_names=True) == []
    assert codes(ORIGINAL + "print(config)\n", MIGRATED + "print(config)\n", unbound_names=True) == ["DDP913"]
    in_a_function = MIGRATED + "\n\ndef report():\n    return undefined_here\n"
    assert codes(ORIGINAL, in_a_function, unbound_names=True) == ["DDP919"]
    # A function's own parameter or local, or a name bound under a guard, is bound.
    bound = MIGRATED + "\n\ndef report(value):\n    total = value\n    return total\n"
    assert codes(ORIGINAL, bound, unbound_names=True) == []


def test_a_name_bound_on_some_paths_only_is_found_where_the_output_reads_it():
    """DDP919 also for a name the output binds in one arm of an `if` (or reads above its
    assignment) and reads where the other paths lead: UnboundLocalError there. Silent where
    the read's own condition is the binding's, where every arm or the handler binds it, where
    a handler ends its path, for loop bodies (taken to run), globals, comprehension variables,
    and where the original's same scope already reads the name so (the user's own pattern)."""
    main = "def main(flag, items):\n{}\n\n\nmain(True, [1])\n"

    def found(body, before="    pass"):
        return [d.code for d in check(main.format(before), main.format(body), [])]

    assert found("    if flag:\n        sampler = 1\n    print(sampler)") == ["DDP919"]
    assert found("    print(sampler)\n    sampler = 1") == ["DDP919"]
    assert found("    try:\n        sampler = int(flag)\n    except ValueError:\n        pass\n    print(sampler)") \
        == ["DDP919"]
    assert found("    sampler = 1\n    del sampler\n    print(sampler)") == ["DDP919"]
    for bound in ("    if flag:\n        sampler = 1\n    if flag:\n        print(sampler)",
                  "    if flag:\n        sampler = 1\n    print(sampler if flag else None)",
                  "    if flag:\n        sampler = 1\n    else:\n        sampler = None\n    print(sampler)",
                  "    try:\n        sampler = int(flag)\n    except ValueError:\n        raise SystemExit(1)\n"
                  "    print(sampler)",
                  "    for item in items:\n        sampler = item\n    print(sampler, item)",
                  "    while True:\n        sampler = 1\n        break\n    print(sampler)",
                  "    print([sampler for sampler in items])",
                  "    if (sampler := len(items)) > 1:\n        pass\n    print(sampler)",
                  "    global sampler\n    if flag:\n        sampler = 1\n    print(sampler)"):
        assert found(bound) == [], bound
    users_own = "    if flag:\n        sampler = 1\n    print(sampler)"
    assert found(users_own + "\n    print(sampler)", before=users_own) == []


def test_a_module_name_a_function_reads_is_bound_on_every_path_of_the_module():
    """A function reads module names after the module's top level has run: `is_main` bound
    only under `if distributed:` raises NameError in a plain `python` run. The `__main__`
    block's bindings count (the functions run from there), as does the read's own condition."""
    def found(module):
        return [d.code for d in check("import os\n", "import os\n" + module, [])]

    assert found("if 'RANK' in os.environ:\n    is_main = True\n\n\ndef log():\n    print(is_main)\n") \
        == ["DDP919"]
    assert found("distributed = 'RANK' in os.environ\nif distributed:\n    is_main = True\n\n\n"
                 "def log():\n    if distributed:\n        print(is_main)\n") == []
    assert found("def train():\n    print(args)\n\n\nif __name__ == '__main__':\n    args = 1\n    train()\n") == []


def test_a_checkpoint_of_the_wrappers_state_dict_is_found():
    """DDP922: `torch.save(model.state_dict(), ...)` after the wrap writes `module.` keys. An
    in-memory copy loaded back into the wrapper, the unwrapped name, and the other arm of an
    isinstance test are not that."""
    unwrapped = 'torch.save(getattr(model, "module", model).state_dict(), "model.pt")'
    assert codes(ORIGINAL, planted(unwrapped, 'torch.save(model.state_dict(), "model.pt")')) == ["DDP922"]
    assert codes(ORIGINAL, planted(unwrapped, 'state = {"model": model.state_dict()}\n'
                                              '        torch.save(state, "model.pt")')) == ["DDP922"]
    for kept in ('best = model.state_dict()\n        model.load_state_dict(best)',
                 'torch.save(model.module.state_dict() if isinstance(model, DDP) else model.state_dict(), "m.pt")'):
        assert codes(ORIGINAL, planted(unwrapped, kept)) == [], kept


def test_a_wrap_of_a_module_with_nothing_to_train_is_found():
    """DDP911: DDP raises when handed a module with no parameter that requires a gradient (a
    loss, a teacher frozen before the wrap). A module unfrozen again, or in part, is not that."""
    wrap_of = 'if distributed:\n    {0} = DDP({0}, device_ids=[local_rank] if device.startswith("cuda") else None)\n'
    frozen = planted(WRAP, WRAP + "teacher = nn.Linear(10, 2).to(device)\nteacher.requires_grad_(False)\n"
                     + wrap_of.format("teacher"))
    assert codes(ORIGINAL, frozen) == ["DDP911"]
    assert codes(ORIGINAL, planted(WRAP, WRAP + "criterion = nn.CrossEntropyLoss()\n"
                                   + wrap_of.format("criterion"))) == ["DDP911"]
    unfrozen = frozen.replace("teacher.requires_grad_(False)\n", "teacher.requires_grad_(False)\n"
                              "for p in teacher.bias_head.parameters():\n    p.requires_grad = True\n")
    # Unfrozen in part, it is still a module no optimizer steps (DDP932).
    assert codes(ORIGINAL, unfrozen) == ["DDP932"]
    # The guard ddpify emits where a model may be frozen at its wrap: DDP is then never built.
    guarded = frozen.replace("if distributed:\n    teacher = DDP(", "if distributed and any(p.requires_grad for p "
                             "in teacher.parameters()):\n    teacher = DDP(")
    assert guarded != frozen
    assert codes(ORIGINAL, guarded) == ["DDP932"]


def test_a_module_frozen_by_a_loop_or_a_helper_then_wrapped_is_found():
    """DDP911, the other spellings of a freeze before the wrap: `p.requires_grad_(False)` in a
    loop over the parameters, and a function of the file that freezes the module handed to it."""
    wrap_of = 'if distributed:\n    teacher = DDP(teacher)\n'
    built = "teacher = nn.Linear(10, 2).to(device)\n"
    in_a_loop = "for name, p in teacher.named_parameters():\n    p.requires_grad_(False)\n"
    assert codes(ORIGINAL, planted(WRAP, WRAP + built + in_a_loop + wrap_of)) == ["DDP911"]
    helper = "def freeze(m):\n    for p in m.parameters():\n        p.requires_grad = False\n"
    assert codes(ORIGINAL, planted(WRAP, WRAP + helper + built + "freeze(teacher)\n" + wrap_of)) == ["DDP911"]
    thaw = helper.replace("False", "True")
    # Thawed, it no longer makes DDP raise, but no optimizer steps it either (DDP932).
    assert codes(ORIGINAL, planted(WRAP, WRAP + thaw + built + "freeze(teacher)\n" + wrap_of)) == ["DDP932"]


@pytest.mark.parametrize("write", [
    'torchvision.utils.save_image(x, "grid.png")',
    'pathlib.Path("loss.txt").write_text(str(loss.item()))',
    'logging.getLogger().addHandler(logging.FileHandler("train.log"))',
])
def test_more_spellings_of_a_write_on_every_rank_are_found(write):
    """DDP913: torchvision's image grid by its qualified name, pathlib's writers, a log file
    handler; a handler whose path is rank 0's (what ddpify emits) writes nowhere on the others."""
    imports = "import logging\nimport pathlib\nimport torchvision\n"
    migrated = planted("import os\n", "import os\n" + imports, planted("optimizer.step()\n",
                       "optimizer.step()\n        " + write + "\n"))
    assert codes(ORIGINAL, migrated) == ["DDP913"]
    rank0 = write.replace('"train.log"', '"train.log" if is_main else os.devnull')
    if rank0 != write:
        assert codes(ORIGINAL, migrated.replace(write, rank0)) == []


def test_the_wrapped_model_handed_to_another_modules_function_on_rank0_only_is_found():
    """DDP916: `if is_main: print(evaluate(model, loader))` with `evaluate` from another module:
    its forward (and, migrated, its gather) is a collective rank 0 alone would wait in. The
    plain model (`model.module`), or the call on every rank into a name, is not that."""
    imported = planted("import os\n", "import os\nfrom evalutil import evaluate\n")
    guarded_call = '    if is_main:\n        print(f"epoch {epoch}: {loss.item():.4f}")\n'
    on_rank0 = planted(guarded_call, guarded_call + "        print(evaluate(model, loader))\n", imported)
    assert codes(ORIGINAL, on_rank0) == ["DDP916"]
    assert codes(ORIGINAL, on_rank0.replace("evaluate(model,", "evaluate(model.module,")) == []
    every_rank = planted(guarded_call, "    score = evaluate(model, loader)\n" + guarded_call, imported)
    assert codes(ORIGINAL, every_rank) == []


def test_a_forward_of_the_wrapped_model_on_rank0_only_is_found():
    """DDP916: the DDP wrapper's forward broadcasts the model's buffers from rank 0, so a run of
    it inside a rank-0 guard (`if is_main: torch.save(generator(z), path)`) waits for ranks
    that never join. The fixture's real output runs the model on every rank first and passes;
    the same output with the run put back under the guard is caught."""
    fixture = Path(__file__).parent.parent / "fixtures" / "side_effects" / "model_run_inside_a_rank0_write"
    original = (fixture / "input.py").read_text()
    expected = (fixture / "expected.py").read_text()
    assert codes(original, expected) == []
    hoisted = ('    generator_value = generator(fixed_z)\n    if is_main:\n'
               '        torch.save(generator_value.detach().cpu(), "samples/%d.pt" % batches_done)\n')
    under_the_guard = ('    if is_main:\n'
                       '        torch.save(generator(fixed_z).detach().cpu(), "samples/%d.pt" % batches_done)\n')
    assert codes(original, planted(hoisted, under_the_guard, expected)) == ["DDP916"]
    # The bare module under the guard is no collective.
    bare = under_the_guard.replace("generator(fixed_z)", 'getattr(generator, "module", generator)(fixed_z)')
    assert codes(original, planted(hoisted, bare, expected)) == []


def test_a_second_join_on_the_same_path_is_found():
    """DDP933: init_process_group twice on one path raises on every rank under torchrun. A join
    asked for first (`if not dist.is_initialized():`), one in each arm of an `if`, or one per
    function is not that."""
    join = '    dist.init_process_group("nccl" if device != "cpu" else "gloo")\n'
    assert codes(ORIGINAL, planted(join, join + join)) == ["DDP933"]
    assert codes(ORIGINAL, planted(join, join + "    if not dist.is_initialized():\n    " + join)) == []
    asked_once = "    if not dist.is_initialized():\n    " + join
    assert codes(ORIGINAL, planted(join, asked_once + "    " + join)) == ["DDP933"]
    arms = join + "else:\n" + join.replace("nccl", "mpi")
    assert codes(ORIGINAL, planted(join, arms.replace("else:\n    ", "else:\n    "))) == []


DESTROY = "\nif distributed:\n    dist.destroy_process_group()\n"
TORCH_DEVICE = ('    device = torch.device(device)\n    if device.type != "cpu":\n'
                '        device = torch.device(device.type, local_rank)\n')

DEFECTS = {
    # name: (the code that catches it, the replacements that plant it in MIGRATED)
    "move deleted": ("DDP910", [("model.to(device)\n" + WRAP, WRAP)]),
    "move after the wrap": ("DDP911", [("model.to(device)\n" + WRAP, WRAP + "model.to(device)\n")]),
    "wrap after training": ("DDP911", [(WRAP + "optimizer", "optimizer"), (DESTROY, "\n" + WRAP + DESTROY)]),
    "sampler dropped": ("DDP912", [("shuffle=sampler is None, sampler=sampler)", "shuffle=True)")]),
    "set_epoch dropped": ("DDP912", [("    if sampler is not None:\n        sampler.set_epoch(epoch)\n", "")]),
    "guard dropped": ("DDP913", [('    if is_main:\n        print(f"epoch {epoch}: {loss.item():.4f}")\n',
                                  '    print(f"epoch {epoch}: {loss.item():.4f}")\n    if is_main:\n')]),
    "string device made a torch.device": (
        "DDP915", [('    if device != "cpu":\n        device = f"{device}:{local_rank}"\n', TORCH_DEVICE)]),
}


def with_defect(name, text=MIGRATED):
    for old, new in DEFECTS[name][1]:
        text = planted(old, new, text)
    return text


@pytest.mark.parametrize("name", DEFECTS)
def test_each_planted_defect_is_caught(name):
    migrated = with_defect(name)
    compile(migrated, name, "exec")
    assert codes(ORIGINAL, migrated) == [DEFECTS[name][0]]


def test_a_deleted_move_is_named_where_it_was():
    """Of two moves of the model, the one the output lacks is named, by its original line."""
    original = planted("model.to(device)\n", "model.to(device)\nmodel.float()\n", ORIGINAL)
    [diagnostic] = check(original, MIGRATED, [])
    assert diagnostic.code == "DDP910"
    assert original.splitlines()[diagnostic.line - 1] == "model.float()"


def test_the_move_and_the_wrap_moved_together_pass():
    """Moving the move and the wrap together keeps the order: nothing to say."""
    migrated = planted("model.to(device)\n" + WRAP, "", MIGRATED)
    migrated = planted("optimizer = ", "model.to(device)\n" + WRAP + "optimizer = ", migrated)
    assert codes(ORIGINAL, migrated) == []


def test_a_diagnostic_found_in_the_output_names_the_original_line():
    migrated = with_defect("guard dropped")
    [diagnostic] = check(ORIGINAL, migrated, [])
    print_line = 'print(f"epoch {epoch}: {loss.item():.4f}")'
    assert ORIGINAL.splitlines()[diagnostic.line - 1].strip() == print_line
    output_line = migrated.splitlines().index("    " + print_line) + 1
    assert f"(output line {output_line})" in diagnostic.message


def test_a_loader_left_whole_passes_when_a_diagnostic_names_it():
    migrated = with_defect("sampler dropped")
    loader_line = ORIGINAL.splitlines().index("loader = DataLoader(dataset, batch_size=8, shuffle=True)") + 1
    assert codes(ORIGINAL, migrated, [Diagnostic("DDP207", loader_line, 10, "sampler kept")]) == []
    # Called an evaluation loader (DDP203), but its pass steps the optimizer: every rank trains on all of it.
    assert codes(ORIGINAL, migrated, [Diagnostic("DDP203", loader_line, 10, "left whole")]) == ["DDP938"]
    # DDP206 names every loader, sharded or not: it explains nothing.
    assert codes(ORIGINAL, migrated, [Diagnostic("DDP206", loader_line, 10, "batch")]) == ["DDP912"]


def test_a_sampler_without_shuffle_needs_no_set_epoch():
    migrated = with_defect("set_epoch dropped")
    migrated = planted("DistributedSampler(dataset, shuffle=True)", "DistributedSampler(dataset, shuffle=False)",
                       migrated)
    assert codes(ORIGINAL, migrated) == []


def test_a_missing_set_epoch_the_migration_reported_passes():
    """DDP211 (no epoch loop found) already names it and exits 1."""
    migrated = with_defect("set_epoch dropped")
    assert codes(ORIGINAL, migrated, [Diagnostic("DDP211", 10, 10, "no epoch loop")]) == []


def test_set_epoch_through_the_loader_passes():
    migrated = planted("        sampler.set_epoch(epoch)", "        loader.sampler.set_epoch(epoch)")
    assert codes(ORIGINAL, migrated) == []


def test_loaders_and_samplers_kept_in_dicts_pass():
    migrated = planted(
        "sampler = DistributedSampler(dataset, shuffle=True) if distributed else None\n"
        "loader = DataLoader(dataset, batch_size=8, shuffle=sampler is None, sampler=sampler)\n",
        'samplers = {x: DistributedSampler(dataset) if distributed else None for x in ["train"]}\n'
        'loaders = {x: DataLoader(dataset, batch_size=8, sampler=samplers[x]) for x in ["train"]}\n'
        'loader = loaders["train"]\n')
    migrated = planted("    if sampler is not None:\n        sampler.set_epoch(epoch)\n",
                       '    if distributed:\n        loaders["train"].sampler.set_epoch(epoch)\n', migrated)
    assert codes(ORIGINAL, migrated) == []
    assert codes(ORIGINAL, migrated.replace(".set_epoch(epoch)", ".epoch = epoch")) == ["DDP912"]


def test_a_class_named_dataloader_of_another_module_is_no_torch_loader():
    """cs230's `from model.data_loader import DataLoader`: the project's own batch maker, not
    torch's DataLoader; the self-check asks no DistributedSampler of it."""
    own = "from model.data_loader import DataLoader as BatchMaker\nfrom model.data_loader import DataLoader\n"
    script = own + "data_loader = DataLoader('data', None)\n"
    assert codes(script, script) == []
    torchs = "from torch.utils.data import DataLoader\n"
    loader = "loader = DataLoader(list(range(8)), batch_size=2, shuffle=True)\n"
    assert codes(torchs + loader, torchs + loader) == ["DDP912"]


def test_a_loader_handed_to_an_object_of_another_module_passes():
    """`trainer = Trainer(...); trainer.fit(loader)` with Trainer imported: its module sets the
    epoch where it iterates the loader. The same call on an object of this file's own class
    hands it nowhere else."""
    loop = ORIGINAL[ORIGINAL.index("for epoch in range"):]
    migrated = with_defect("set_epoch dropped")
    migrated = migrated[:migrated.index("for epoch in range")] + "trainer = Trainer(model)\ntrainer.fit(loader)\n"
    original = ORIGINAL.replace(loop, "trainer = Trainer(model)\ntrainer.fit(loader)\n")
    imported = "from engine import Trainer\n"
    assert codes(imported + original, imported + migrated) == []
    own = "class Trainer:\n    def __init__(self, model):\n        self.model = model\n\n    def fit(self, loader):\n" \
          "        pass\n\n\n"
    assert codes(own + original, own + migrated) == ["DDP912"]


def test_a_loader_handed_to_a_function_of_an_imported_module_passes():
    """`import engine` then `engine.train(model, loader)`: that module sets the epoch where it
    iterates the loader. A pass started here through such a module's wrapper (`for x, y in
    tqdm.tqdm(loader)`) is this file's own, and needs set_epoch here."""
    loop = ORIGINAL[ORIGINAL.index("for epoch in range"):]
    migrated = with_defect("set_epoch dropped")
    migrated = migrated[:migrated.index("for epoch in range")] + "engine.train(model, loader)\n"
    original = ORIGINAL.replace(loop, "engine.train(model, loader)\n")
    assert codes("import engine\n" + original, "import engine\n" + migrated) == []
    wrapped = with_defect("set_epoch dropped").replace("for x, y in loader:", "for x, y in tqdm.tqdm(loader):")
    assert codes("import tqdm\n" + ORIGINAL.replace("for x, y in loader:", "for x, y in tqdm.tqdm(loader):"),
                 "import tqdm\n" + wrapped) == ["DDP912"]


def test_a_sampler_built_by_a_helper_the_migration_added_passes():
    """ddpify's own helpers (evaluation_shard, a wrapper of the user's sampler) shard."""
    helper = "def rank_share(sampler):\n    return sampler\n\n\n"
    migrated = helper + planted("sampler = DistributedSampler(dataset, shuffle=True) if distributed else None",
                                "sampler = rank_share(RandomSampler(dataset)) if distributed else None")
    assert codes(ORIGINAL, migrated) == []
    assert codes(helper + ORIGINAL, migrated) == ["DDP912"]  # the user's own function is no sharder


def test_a_torch_device_used_only_where_one_is_accepted_passes():
    """The type changed, but nothing reads it as a string: harmless, so quiet."""
    read_as_string = 'if device.startswith("cuda"):\n    torch.backends.cudnn.benchmark = True\n'
    original = planted(read_as_string, "", ORIGINAL)
    migrated = planted(read_as_string, "", with_defect("string device made a torch.device"))
    migrated = planted('"nccl" if device != "cpu" else "gloo"', "dist.get_default_backend_for_device(device)", migrated)
    migrated = planted('device.startswith("cuda") else None', 'device.type == "cuda" else None', migrated)
    assert codes(original, migrated) == []


def test_a_string_read_of_another_variable_of_the_same_name_passes():
    """`device.startswith` on a function's own `device` parameter is not the module's device."""
    read_as_string = 'if device.startswith("cuda"):\n    torch.backends.cudnn.benchmark = True\n'
    own_device = 'def on_gpu(device):\n    return device.startswith("cuda")\n\n\n'
    original = own_device + planted(read_as_string, "", ORIGINAL)
    migrated = planted(read_as_string, "", with_defect("string device made a torch.device"))
    migrated = planted('"nccl" if device != "cpu" else "gloo"', "dist.get_default_backend_for_device(device)", migrated)
    migrated = own_device + planted('device.startswith("cuda") else None', 'device.type == "cuda" else None', migrated)
    assert codes(original, migrated) == []
    assert codes(original, migrated.replace("def on_gpu(device):", "def on_gpu():")) == ["DDP915"]


# A model moved to the CPU to be saved, then back: ddpify drops both moves of the wrapped model
# (DDP106). Before the wrap, a move is never the wrapped model's.
CPU_ROUND_TRIP = "    torch.save(model.state_dict(), \"model.pt\")\n"


def test_a_move_of_the_wrapped_model_dropped_with_ddp106_passes():
    original = planted(CPU_ROUND_TRIP, "    model.cpu()\n" + CPU_ROUND_TRIP + "    model.to(device)\n", ORIGINAL)
    dropped = [Diagnostic("DDP106", line, 5, "dropped") for line, text in enumerate(original.splitlines(), 1)
               if text in ("    model.cpu()", "    model.to(device)")]
    assert len(dropped) == 2
    assert codes(original, MIGRATED, dropped) == []
    assert codes(original, MIGRATED, []) == ["DDP910"]


def test_ddp106_does_not_excuse_a_move_before_the_wrap():
    move_line = ORIGINAL.splitlines().index("model.to(device)") + 1
    migrated = with_defect("move deleted")
    assert codes(ORIGINAL, migrated, [Diagnostic("DDP106", move_line, 1, "dropped")]) == ["DDP910"]


def test_ddp106_does_not_excuse_the_move_that_puts_the_model_on_its_device():
    """`for epoch ...: model.to(device).train()`, nothing moving it before: the wrap before
    the loop wraps a CPU module, and the dropped move is not a round trip."""
    original = ORIGINAL.replace("model.to(device)\n", "")
    original = planted("    for x, y in loader:\n", "    model.to(device).train()\n    for x, y in loader:\n", original)
    move_line = original.splitlines().index("    model.to(device).train()") + 1
    migrated = MIGRATED.replace("model.to(device)\n", "")
    migrated = planted("    for x, y in loader:\n", "    model.train()\n    for x, y in loader:\n", migrated)
    assert codes(original, migrated, [Diagnostic("DDP106", move_line, 5, "dropped")]) == ["DDP910"]


def test_a_model_reloaded_for_evaluation_after_training_passes():
    reload = 'model = nn.Linear(10, 2)\nmodel.load_state_dict(torch.load("model.pt"))\nmodel.to(device)\n'
    original = ORIGINAL + reload
    # (ddpify's output loads with a map_location: DDP957 otherwise.)
    reloaded = reload.replace('torch.load("model.pt")', 'torch.load("model.pt", map_location=device)')
    migrated = planted("\nif distributed:\n    dist.destroy_process_group()\n",
                       reloaded + "\nif distributed:\n    dist.destroy_process_group()\n")
    assert codes(original, migrated) == []


HELPER = 'def report(value):\n    print(f"loss {value:.4f}")\n\n\n'


@pytest.mark.parametrize("call, expected", [
    ("    report(loss.item())\n", ["DDP913"]),
    ("    if is_main:\n        report(loss.item())\n", []),
    ("", []),  # never called here: a library function, not this run's output
])
def test_output_in_a_helper_counts_where_the_helper_is_called(call, expected):
    original = planted("device = ", HELPER + "device = ", ORIGINAL)
    migrated = planted("device = ", HELPER + "device = ", MIGRATED)
    migrated = planted("    if is_main:\n        print(", call + "    if is_main:\n        print(", migrated)
    assert codes(original, migrated) == expected


@pytest.mark.parametrize("statement", [
    'print("done")', 'torch.save(getattr(model, "module", model), "m.pt")', 'log = open("log.txt", "a")',
    'os.makedirs("out")',
    'json.dump({}, log)', 'figure.savefig("loss.png")', 'writer = SummaryWriter("runs")',
    'Image.fromarray(pixels).convert("L").save("sample.png")', 'T.ToPILImage()(x[0]).save("x.png")',
    'getattr(model, "module", model).save_pretrained("out")', 'tokenizer.save_pretrained(save_directory="out")',
    'torch.jit.trace(getattr(model, "module", model), x).save("model.ts")', 'torch.jit.save(scripted, "model.ts")',
    'torch.onnx.export(getattr(model, "module", model), x, "model.onnx")',
])
def test_each_kind_of_output_after_the_join_needs_a_guard(statement):
    unguarded = MIGRATED + statement + "\n"
    guarded = MIGRATED + "if is_main:\n    " + statement + "\n"
    assert codes(ORIGINAL, unguarded) == ["DDP913"]
    assert codes(ORIGINAL, guarded) == []
    assert codes(ORIGINAL, MIGRATED + 'with open("log.txt") as log:\n    pass\n') == []  # reading


BARE = 'getattr(model, "module", model)'  # the model a save is handed (DDP922)


@pytest.mark.parametrize("imports, statement", [
    ("from safetensors.torch import save_file\n", f'save_file({BARE}.state_dict(), "m.safetensors")'),
    ("from safetensors.torch import save_model as save_weights\n", 'save_weights(model, "m.safetensors")'),
    ("import safetensors.torch as st\n", f'st.save_file({BARE}.state_dict(), "m.safetensors")'),
    ("import safetensors.torch\n", f'safetensors.torch.save_file({BARE}.state_dict(), "m.safetensors")'),
    ("import joblib\n", 'joblib.dump(history, "history.joblib")'),
    ("import scipy.io as sio\n", 'sio.savemat("weights.mat", {"w": weights})'),
    ("from omegaconf import OmegaConf\n", 'OmegaConf.save(config, "config.yaml")'),
    ("import shutil\n", 'shutil.make_archive("run", "zip", "runs")'),
    ("import h5py\n", 'features = h5py.File("features.h5", "w")'),
    ("import zipfile\n", 'archive = zipfile.ZipFile("run.zip", mode="a")'),
    ("import tarfile\n", 'archive = tarfile.open("run.tar.gz", "w:gz")'),
    ("import mlflow\n", 'mlflow.log_metric("loss", 0.5, step=1)'),
    ("import matplotlib.pyplot as plt\n", "plt.show()"),
    ("from matplotlib import pyplot\n", "pyplot.pause(0.1)"),
    ("import tensorflow as tf\n", 'board = tf.summary.FileWriter("logs")'),
    ("import tensorflow as tf\n", 'board = tf.summary.create_file_writer("logs")'),
    ("from tensorboardX import FileWriter\n", 'board = FileWriter("logs")'),
])
def test_a_write_by_the_name_it_was_imported_from_needs_a_guard(imports, statement):
    unguarded = imports + MIGRATED + statement + "\n"
    assert codes(imports + ORIGINAL, unguarded) == ["DDP913"]
    assert codes(imports + ORIGINAL, imports + MIGRATED + "if is_main:\n    " + statement + "\n") == []
    # A function of the script's own by that name is not the library's.
    own = MIGRATED + 'def save_file(state, path):\n    pass\nsave_file(' + BARE + '.state_dict(), "m.safetensors")\n'
    assert codes(ORIGINAL, own) == []


def test_a_format_opened_for_reading_writes_nothing():
    assert codes("import h5py\n" + ORIGINAL, "import h5py\n" + MIGRATED + 'features = h5py.File("f.h5", "r")\n') == []


def test_a_torchscript_module_bound_to_a_name_saves_itself():
    made = planted("torch.manual_seed(0)\n", "traced = torch.jit.script(nn.Linear(2, 2))\ntorch.manual_seed(0)\n")
    assert codes(ORIGINAL, made + 'traced.save("model.ts")\n') == ["DDP913"]
    assert codes(ORIGINAL, made + 'if is_main:\n    traced.save("model.ts")\n') == []


def test_a_pillow_image_bound_to_a_name_saves_itself():
    made = planted("torch.manual_seed(0)\n", "picture = Image.new(\"RGB\", (4, 4))\ntorch.manual_seed(0)\n")
    assert codes(ORIGINAL, made + 'picture.save("sample.png")\n') == ["DDP913"]
    assert codes(ORIGINAL, made + 'if is_main:\n    picture.save("sample.png")\n') == []
    assert codes(ORIGINAL, MIGRATED + 'trainer.save("run")\n') == []  # not an image: not named


def test_output_before_the_group_is_joined_needs_no_guard():
    migrated = planted("# Distributed setup", 'print("starting")\n# Distributed setup')
    assert codes(ORIGINAL, migrated) == []


def test_local_rank_zero_going_first_at_a_barrier_passes():
    """ddpify's download block: local rank 0 makes the files while the others wait."""
    download = ('if distributed and local_rank != 0:\n    dist.barrier()\nos.makedirs("data", exist_ok=True)\n'
                'if distributed and local_rank == 0:\n    dist.barrier()\n')
    migrated = planted("torch.manual_seed(0)\n", download + "torch.manual_seed(0)\n")
    assert codes(ORIGINAL, migrated) == []
    assert codes(ORIGINAL, planted("torch.manual_seed(0)\n", 'os.makedirs("data", exist_ok=True)\n'
                                   "torch.manual_seed(0)\n")) == ["DDP913"]


def test_output_after_rank_zero_releases_the_others_needs_a_guard():
    """After `if local_rank == 0: dist.barrier()` every rank runs again: a table written
    there is written by each of them."""
    download = ('if distributed and local_rank != 0:\n    dist.barrier()\nos.makedirs("data", exist_ok=True)\n'
                'if distributed and local_rank == 0:\n    dist.barrier()\n')
    written = 'frame.to_csv("stats.csv")\n'
    migrated = planted("torch.manual_seed(0)\n", download + written + "torch.manual_seed(0)\n")
    assert codes(ORIGINAL, migrated) == ["DDP913"]
    text_only = planted("torch.manual_seed(0)\n", download + "text = frame.to_csv()\ntorch.manual_seed(0)\n")
    assert codes(ORIGINAL, text_only) == []


def _as_main_function(text):
    """The flat script's body as `main()`, run under `if __name__ == "__main__":`."""
    head, _, body = text.partition('device = "cuda"')
    indented = "".join("    " + line if line.strip() else line for line in ('device = "cuda"' + body).splitlines(True))
    return head + "def main():\n" + indented + '\n\nif __name__ == "__main__":\n    main()\n'


def test_setup_inside_main_keeps_the_module_importable():
    assert codes(_as_main_function(ORIGINAL), _as_main_function(MIGRATED)) == []


def test_setup_at_module_level_joins_on_import():
    """The planted output joins the group at import, though the original was importable."""
    setup_start, setup_end = MIGRATED.index("# Distributed setup"), MIGRATED.index("if device.startswith")
    setup = MIGRATED[setup_start:setup_end]
    migrated = _as_main_function(MIGRATED.replace(setup, ""))
    migrated = planted("def main():\n", setup + "\n\ndef main():\n", migrated)
    compile(migrated, "planted", "exec")
    assert codes(_as_main_function(ORIGINAL), migrated) == ["DDP914"]
    # ddpify's own form: the flag includes `__name__ == "__main__"`, so an import joins nothing.
    only_when_run = planted('distributed = "WORLD_SIZE" in os.environ\n',
                            'distributed = "WORLD_SIZE" in os.environ and __name__ == "__main__"\n', migrated)
    assert codes(_as_main_function(ORIGINAL), only_when_run) == []


def test_a_wrap_in_one_branch_of_a_resumed_model_is_caught():
    original = planted("model = nn.Linear(10, 2)\nmodel.to(device)\n",
                       'if os.path.exists("model.pt"):\n    model = torch.load("model.pt", weights_only=False)\n'
                       "else:\n    model = nn.Linear(10, 2)\nmodel.to(device)\n", "import os\n" + ORIGINAL)
    one_branch = planted("model = nn.Linear(10, 2)\nmodel.to(device)\n" + WRAP,
                         'if os.path.exists("model.pt"):\n'
                         '    model = torch.load("model.pt", weights_only=False, map_location=device)\n'
                         "else:\n    model = nn.Linear(10, 2)\n    model.to(device)\n"
                         "    if distributed:\n        model = DDP(model)\n")
    after_the_merge = planted("model = nn.Linear(10, 2)\nmodel.to(device)\n" + WRAP,
                              'if os.path.exists("model.pt"):\n'
                              '    model = torch.load("model.pt", weights_only=False, map_location=device)\n'
                              "else:\n    model = nn.Linear(10, 2)\nmodel.to(device)\n" + WRAP)
    assert codes(original, one_branch) == ["DDP911"]
    assert codes(original, after_the_merge) == []


def test_a_wrap_in_each_branch_that_builds_and_trains_passes_and_a_branch_left_out_is_caught():
    """`if mode == "teacher": model = A(); ...; train` / `else: model = B(); ...; train`: each
    branch is its own path; a wrap in each passes, a branch without one trains alone."""
    branches = ('if os.environ.get("MODE") == "small":\n    model = nn.Linear(10, 2)\n    model.to(device)\n'
                "{wrap}    train(model)\nelse:\n    model = nn.Sequential(nn.Linear(10, 2))\n    model.to(device)\n"
                "{wrap}    train(model)\n")
    body = ("def train(net):\n    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)\n"
            "    for epoch in range(2):\n{set_epoch}        for x, y in loader:\n            optimizer.zero_grad()\n"
            "            nn.functional.cross_entropy(net(x), y).backward()\n            optimizer.step()\n\n\n")
    head, _, _ = ORIGINAL.partition("model = nn.Linear(10, 2)\n")
    original = "import os\n" + head + body.format(set_epoch="") + branches.format(wrap="")
    migrated_head, _, _ = MIGRATED.partition("model = nn.Linear(10, 2)\n")
    indented_wrap = "".join("    " + line + "\n" for line in WRAP.splitlines())
    set_epoch = "        if sampler is not None:\n            sampler.set_epoch(epoch)\n"
    each = migrated_head + body.format(set_epoch=set_epoch) + branches.format(wrap=indented_wrap)
    assert codes(original, each) == []
    one = each.replace(indented_wrap + "    train(model)\nelse", "    train(model)\nelse", 1)
    assert one != each and codes(original, one) == ["DDP911"]
    other = each[::-1].replace(indented_wrap[::-1], "", 1)[::-1]
    assert other != each and codes(original, other) == ["DDP911"]


# Scripts written fresh for issue 17 that today's ddpify migrates wrongly with exit 0; their
# outputs as ddpify wrote them then, and the diagnostics it gave beside the plain edits.
TODAYS_WRONG = {
    "gan": (["DDP910", "DDP910"], [("DDP106", 30), ("DDP106", 31)]),  # generator.cuda() deleted
    "later": (["DDP910"], [("DDP106", 11)]),  # net.cuda() deleted
    "resume": (["DDP911"], [("DDP303", 23)]),  # wrap in the fresh branch, before the move
    "strdev2": (["DDP915"], []),  # the string device became a torch.device
    "loaders_first": (["DDP917", "DDP917"], []),  # samplers asked for the group before Trainer joined it
    # the wrap in Trainer.__init__ above the join below it: no rank wraps (fixed in ad7f4e1)
    "wrap_before_join": (["DDP917"], []),
    # the whole `with open(log)` block under `if is_main:`, the training inside it (its
    # set_epoch, the wrapped model's forward, the backward)
    "csv_log_around_training": (["DDP916", "DDP916", "DDP916"], []),
}


@pytest.mark.parametrize("shape", TODAYS_WRONG)
def test_todays_wrong_migrations_are_caught(shape):
    expected, reported = TODAYS_WRONG[shape]
    original = (SHAPES / f"{shape}.py").read_text()
    wrong = (SHAPES / f"{shape}_ddp_wrong.py").read_text()
    diagnostics = [Diagnostic(code, line, 1, "") for code, line in reported]
    assert codes(original, wrong, diagnostics) == expected


def test_output_that_does_not_parse_is_an_internal_error(monkeypatch):
    """A transform bug that emits broken code is exit 2, never a written file."""
    def check_broken_output(original, migrated, *rest):
        return check(original, migrated + "def (", [])

    monkeypatch.setattr("ddpify.selfcheck.check", check_broken_output)
    with pytest.raises(MigrationError, match="does not parse"):
        migrate_source(ORIGINAL)


def test_migrate_source_adds_the_self_check_and_honours_ignore_and_suppressions(monkeypatch):
    print_line = ORIGINAL.splitlines().index('    print(f"epoch {epoch}: {loss.item():.4f}")') + 1
    planted_finding = Diagnostic("DDP913", print_line, 1, "planted")
    monkeypatch.setattr("ddpify.selfcheck.check", lambda *args: [planted_finding])
    assert planted_finding in migrate_source(ORIGINAL).diagnostics
    assert migrate_source(ORIGINAL).needs_a_person
    assert planted_finding not in migrate_source(ORIGINAL, Options(ignore=("DDP91",))).diagnostics
    suppressed = ORIGINAL.replace('.4f}")\n', '.4f}")  # ddpify: ignore[DDP913]\n')
    assert planted_finding not in migrate_source(suppressed).diagnostics


def test_the_self_check_knows_every_file_writing_method_the_transform_guards():
    """The self-check shares no code with the transform (a second opinion), so its list of
    methods by which an object writes itself to a path is its own copy: a method the
    transform learns to guard and the self-check does not would go unchecked."""
    from ddpify.rules import side_effects
    from ddpify.selfcheck import output

    assert output.WRITING_METHODS == side_effects.FILE_WRITING_METHODS
    assert output.PATH_KEYWORDS == side_effects.PATH_KEYWORDS


JOINED_IN_AN_ARGUMENT = '''
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def get_config():
    dist.init_process_group("gloo")
    return {}


def main(config):
    model = build(config)
    if dist.is_initialized():
        model = DDP(model)


if __name__ == "__main__":
    main({call})
'''


def test_a_group_joined_in_the_arguments_of_the_call_comes_before_its_body():
    """`main(get_config())`: Python runs get_config, which joins the group, before main's
    body, so the wrap there sees the group; `main({})` followed by nothing joins it never."""
    from ddpify.selfcheck.setup import asked_before_the_group
    from ddpify.selfcheck.source import Source

    joined = Source(JOINED_IN_AN_ARGUMENT.replace("{call}", "get_config()"))
    assert list(asked_before_the_group(joined)) == []
    never = Source(JOINED_IN_AN_ARGUMENT.replace("{call}", "{}"))
    assert [code for code, _, _ in asked_before_the_group(never)] == ["DDP917"]
    keyword = Source(JOINED_IN_AN_ARGUMENT.replace("def main(config)", "def main(config=None)")
                     .replace("{call}", "config=get_config()"))
    assert list(asked_before_the_group(keyword)) == []


GATHER = "        q, k = gather_with_grad(q), gather_with_grad(k)\n"
GATHER_DEFECTS = {
    # name: the replacements that plant it in the migrated InfoNCE script
    "similarity made before the gather": [(GATHER, ""), ("        loss = ", GATHER + "        loss = ")],
    "labels sized by the rank's inputs": [("len(logits)", "x.size(0)")],
    "a later per-sample use": [("        optimizer.zero_grad()\n",
                                "        loss = loss + q.pow(2).mean()\n        optimizer.zero_grad()\n")],
    "only one embedding gathered": [(GATHER, "        q = gather_with_grad(q)\n")],
    "gathered in an evaluation loop": [
        (GATHER, ""), ("        optimizer.step()\n",
                       "        optimizer.step()\n    with torch.no_grad():\n        for (x,) in loader:\n"
                       "            q, k = model(x), model(x)\n" + "    " + GATHER
                       + "            logits = q @ k.T\n            labels = torch.arange(len(logits))\n")],
}


@pytest.fixture(scope="module")
def gathered_info_nce():
    from ddpify.rules import in_batch
    return in_batch._INFO_NCE, migrate_source(in_batch._INFO_NCE, Options()).code


def test_the_gather_of_in_batch_negatives_passes(gathered_info_nce):
    original, migrated = gathered_info_nce
    assert GATHER in migrated
    assert codes(original, migrated) == []


@pytest.mark.parametrize("name", GATHER_DEFECTS)
def test_a_misplaced_gather_is_caught(gathered_info_nce, name):
    original, migrated = gathered_info_nce
    for old, new in GATHER_DEFECTS[name]:
        migrated = planted(old, new, migrated)
    compile(migrated, name, "exec")
    assert codes(original, migrated) == ["DDP923"]


LOSS_FUNCTION = '''import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def info_nce(queries, keys):
    logits = queries @ keys.T / 0.1
    return F.cross_entropy(logits, torch.arange(logits.size(0)))


model = torch.nn.Linear(8, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(64, 8)), batch_size=16, shuffle=True)
for epoch in range(3):
    for (x,) in loader:
        q, k = model(x), model(x + 0.1)
        loss = info_nce(q, k)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
'''


def test_a_gather_before_a_loss_function_is_checked_inside_it():
    """The gather goes before the call of a loss function of the module: the similarity and the
    labels are read in that function, where a defect is caught."""
    migrated = migrate_source(LOSS_FUNCTION, Options()).code
    assert "q, k = gather_with_grad(q), gather_with_grad(k)\n        loss = info_nce(q, k)" in migrated
    assert codes(LOSS_FUNCTION, migrated) == []
    assert codes(LOSS_FUNCTION, planted("logits.size(0)", "16", migrated)) == ["DDP923"]
    cut = planted("    return F.cross_entropy(", "    keys = keys[:16]\n    return F.cross_entropy(", migrated)
    assert codes(LOSS_FUNCTION, cut) == ["DDP923"]
    assert codes(LOSS_FUNCTION, planted("info_nce(q, k)", "info_nce(q, x)", migrated)) == ["DDP923"]


def test_a_gather_before_a_loss_module_is_checked_in_its_forward():
    """`criterion = Loss()`, `loss = criterion(q, k)`: the similarity is read in Loss.forward."""
    source = LOSS_FUNCTION.replace(
        "def info_nce(queries, keys):\n    logits = queries @ keys.T / 0.1\n    return F.cross_entropy(",
        "class InfoNCE(torch.nn.Module):\n    def forward(self, queries, keys):\n"
        "        logits = queries @ keys.T / 0.1\n        return F.cross_entropy(",
    ).replace("loader = DataLoader", "info_nce = InfoNCE()\nloader = DataLoader")
    migrated = migrate_source(source, Options()).code
    assert "q, k = gather_with_grad(q), gather_with_grad(k)\n        loss = info_nce(q, k)" in migrated
    assert codes(source, migrated) == []
    assert codes(source, planted("logits.size(0)", "16", migrated)) == ["DDP923"]


NUMERICS = Path(__file__).resolve().parent.parent / "fixtures" / "numerics"
VIEWS_GATHER = ("        z_i, z_j = gather_with_grad(z_i), gather_with_grad(z_j)\n"
                "        z = torch.cat([z_i, z_j], dim=0)\n")
PLAIN_ALL_GATHER = ("    rows = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]\n"
                    "    dist.all_gather(rows, tensor.contiguous())\n    return torch.cat(rows)\n")
VIEWS_DEFECTS = {
    # name: the replacements that plant it in the migrated NT-Xent loop (each view gathered, then concatenated)
    "the concatenation gathered whole (a view's pair is no longer N rows away)": [
        (VIEWS_GATHER, "        z = torch.cat([z_i, z_j], dim=0)\n        z = gather_with_grad(z)\n"),
        ("n = z_i.shape[0]", "n = z.shape[0] // 2")],
    "labels from a configured batch size": [("n = z_i.shape[0]", "n = 32")],
    "a gather without gradient": [("    return GatherWithGrad.apply(tensor)\n", PLAIN_ALL_GATHER)],
    "a view read per sample after the similarity": [
        ("        optimizer.zero_grad()\n",
         "        loss = loss + z_i.pow(2).mean()\n        optimizer.zero_grad()\n")],
    "only one view gathered": [
        (VIEWS_GATHER, "        z_i = gather_with_grad(z_i)\n        z = torch.cat([z_i, z_j], dim=0)\n")],
}


@pytest.fixture(scope="module")
def gathered_views():
    original = (NUMERICS / "nt_xent_of_concatenated_views_in_the_loop_gathered" / "input.py").read_text()
    return original, migrate_source(original, Options()).code


def test_views_gathered_before_their_concatenation_pass(gathered_views):
    original, migrated = gathered_views
    assert VIEWS_GATHER in migrated
    assert codes(original, migrated) == []


@pytest.mark.parametrize("name", VIEWS_DEFECTS)
def test_a_broken_gather_of_views_is_caught(gathered_views, name):
    original, migrated = gathered_views
    for old, new in VIEWS_DEFECTS[name]:
        migrated = planted(old, new, migrated)
    compile(migrated, name, "exec")
    assert codes(original, migrated) == ["DDP923"]


@pytest.mark.parametrize("idiom, defect", [
    ("nt_xent_function_with_cosine_similarity_gathered", ("batch = z1.size(0)", "batch = 64")),
    ("nt_xent_module_scoring_views_with_einsum_gathered", ("n = len(z_a)", "n = 20")),
    ("info_nce_spelled_as_einsum_gathered", ("torch.arange(q.shape[0]", "torch.arange(16")),
])
def test_views_and_einsum_similarities_are_read_by_the_check(idiom, defect):
    """cosine_similarity of every row with every row, einsum "nc,mc->nm", and a loss function
    or module handed the views: the check reads them; a fixed label size is caught."""
    original = (NUMERICS / idiom / "input.py").read_text()
    migrated = migrate_source(original, Options()).code
    assert codes(original, migrated) == []
    assert codes(original, planted(*defect, migrated)) == ["DDP923"]


def test_a_wrap_before_a_helper_that_moves_the_model_or_inside_one_whose_result_is_dropped_is_caught():
    """`def to_device(m, d): return m.to(d)` called as a statement moves the model in place:
    a wrap before that call wraps a CPU module; a wrap inside the helper rebinds its local
    name, and the caller, which drops what the helper returns, trains unwrapped."""
    helper = "def to_device(m, d):\n    return m.to(d)\n\n\n"
    original = helper + ORIGINAL.replace("model.to(device)\n", "to_device(model, device)\n", 1)
    right = helper + MIGRATED.replace("model.to(device)\n", "to_device(model, device)\n", 1)
    assert codes(original, right) == []
    before = helper + MIGRATED.replace("model.to(device)\n" + WRAP, WRAP + "to_device(model, device)\n", 1)
    assert codes(original, before) == ["DDP911"]
    inside = ("def to_device(m, d):\n    m = m.to(d)\n    if distributed:\n        m = DDP(m)\n    return m\n\n\n"
              + MIGRATED.replace("model.to(device)\n" + WRAP, "to_device(model, device)\n", 1))
    assert "DDP911" in codes(original, inside)


def test_a_wrap_before_a_loop_moving_the_submodules_or_a_call_moving_the_model_from_outside_is_caught():
    """`for layer in model: layer.to(device)` moves the model one submodule at a time, and
    `def place(): model.to(device)` called as `place()` moves the model it reads from the
    module: a wrap before either wraps a CPU module."""
    for move in ("for layer in model:\n    layer.to(device)\n",
                 "for _, child in model.named_children():\n    child.to(device)\n",
                 "def place():\n    model.to(device)\n\n\nplace()\n"):
        original = ORIGINAL.replace("model.to(device)\n", move, 1)
        right = MIGRATED.replace("model.to(device)\n", move, 1)
        assert codes(original, right) == []
        before = MIGRATED.replace("model.to(device)\n" + WRAP, WRAP + move, 1)
        assert codes(original, before) == ["DDP911"]


FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def fixture(path):
    """A fixture's input, its expected output, and the migration's diagnostics there."""
    folder = FIXTURES / path
    diagnostics = [Diagnostic(code, int(line), 1, "") for line, code in re.findall(
        r"^input\.py:(\d+):\d+: (DDP\d+)", (folder / "expected.txt").read_text(), re.MULTILINE)]
    return (folder / "input.py").read_text(), (folder / "expected.py").read_text(), diagnostics


@pytest.mark.parametrize("move", [".to(device=device, dtype=torch.float64)", ".cuda()", ".to(device)"])
def test_a_move_chained_on_the_construction_deleted_is_found(move):
    """DDP910: `model = Net().to(device=device, dtype=torch.float64)` moves no named value, so
    its move is counted as a move of the name it fills: the chain deleted is found."""
    built = "model = nn.Linear(10, 2)\nmodel.to(device)\n"
    original = planted(built, f"model = nn.Linear(10, 2){move}\n", ORIGINAL)
    right = planted(built, f"model = nn.Linear(10, 2){move.replace('.cuda()', '.to(device)')}\n")
    assert codes(original, right) == []
    assert codes(original, planted(built, "model = nn.Linear(10, 2)\n")) == ["DDP910"]
    # In a fixture's real output: `nn.Sequential(...).to(device)`.
    original, expected, diagnostics = fixture("model/sequential_layer_frozen_mid_training")
    assert codes(original, expected, diagnostics) == []
    deleted = planted("nn.Linear(16, 2)).to(device)\n", "nn.Linear(16, 2))\n", expected)
    assert codes(original, deleted, diagnostics) == ["DDP910"]


@pytest.mark.parametrize("path, move", [
    ("setup/model_moved_by_a_conditional_expression_on_a_cuda_flag",
     "net = net.to(device) if args.cuda else net\n"),
    ("model/model_read_from_an_object_whose_init_moves_it_by_a_conditional_expression",
     "        self.net = self.net.to(device) if cuda else self.net\n"),
])
def test_a_move_in_a_conditional_expression_deleted_is_found(path, move):
    """DDP910: `self.net = net.cuda() if use_cuda else net` (in `__init__` or anywhere) moves
    `net` on one arm: it counts as a move, and deleting the line is found."""
    original, expected, diagnostics = fixture(path)
    assert codes(original, expected, diagnostics) == []
    assert codes(original, planted(move, "", expected), diagnostics) == ["DDP910"]
    # As a statement of its own, `model.cuda() if cuda else None`.
    statement = ORIGINAL.replace("model.to(device)\n", "model.to(device) if device != 'cpu' else None\n")
    assert codes(statement, planted("model.to(device)\n" + WRAP, WRAP)) == ["DDP910"]


def test_a_wrap_in_a_try_whose_handler_carries_on_before_training_is_found():
    """DDP911: the wrap in the body of a `try:` whose `except` carries on is skipped where the
    body raised before it; a training after the `try` then trains the bare model. A handler
    that re-raises, or training only inside the body, is fine."""
    original, expected, diagnostics = fixture("model/model_moved_and_trained_in_try_body")
    assert codes(original, expected, diagnostics) == []
    again = ("for batch, label in loader:\n    loss = criterion(model(batch.to(device)), label.to(device))\n"
             "    optimizer.zero_grad()\n    loss.backward()\n    optimizer.step()\n")
    handler = '        print("interrupted, saving what we have")\n'
    trained_after = planted(handler, handler + "\n" + again, expected)
    assert codes(original, trained_after, diagnostics) == ["DDP911"]
    reraised = planted(handler, handler + "    raise\n", trained_after)
    assert codes(original, reraised, diagnostics) == []
    # The model moved in a `try:` that falls back to the CPU: the wrap belongs after it.
    guarded = "try:\n    model.to(device)\nexcept RuntimeError:\n    pass\n"
    original = ORIGINAL.replace("model.to(device)\n", guarded)
    assert codes(original, planted("model.to(device)\n", guarded)) == []
    inside = "try:\n    model.to(device)\n" + "".join("    " + line for line in WRAP.splitlines(True)) \
        + "except RuntimeError:\n    pass\n"
    assert codes(original, planted("model.to(device)\n" + WRAP, inside)) == ["DDP911"]


@pytest.mark.parametrize("freeze", [
    "model.requires_grad_(False)\n",
    "for p in model.parameters():\n    p.requires_grad = False\n",
    "freeze(model)\n",
    "model.module.bias.requires_grad_(False)\n",
    'getattr(model, "module", model).bias.requires_grad_(False)\n',
])
def test_a_model_frozen_after_its_wrap_is_found(freeze):
    """DDP928: a part frozen after the wrap leaves DDP waiting for its gradients; the whole
    model frozen for good after it trains nothing and needs no wrap. Frozen before the wrap,
    or toggled whole (a GAN's discriminator), is not that."""
    helper = "def freeze(m):\n    for p in m.parameters():\n        p.requires_grad = False\n\n\n"
    assert codes(ORIGINAL, helper + planted(WRAP, WRAP + freeze)) == ["DDP928"]
    toggled = "model.requires_grad_(False)\nmodel.requires_grad_(True)\n"
    assert codes(ORIGINAL, planted(WRAP, WRAP + toggled)) == []


def test_a_part_frozen_after_the_wrap_that_the_migration_reported_is_said_once():
    """The migration's DDP111 names a part of the model frozen after its wrap: the self-check
    does not repeat it, and finds it where the report is missing."""
    original, expected, diagnostics = fixture("model/sequential_layer_frozen_mid_training")
    assert "DDP111" in [d.code for d in diagnostics]
    assert codes(original, expected, diagnostics) == []
    assert codes(original, expected, [d for d in diagnostics if d.code != "DDP111"]) == ["DDP928"]


@pytest.mark.parametrize("draw", [
    'for m in getattr(model, "module", model).modules():\n    if isinstance(m, nn.Linear):\n'
    '        nn.init.kaiming_normal_(m.weight)\n',
    "with torch.no_grad():\n    model.module.weight.normal_(0, 0.01)\n",
    "model.apply(init)\n",
    "init(model)\n",
    'for m in getattr(model, "module", model).children():\n    m.reset_parameters()\n',
])
def test_weights_drawn_after_the_wrap_are_found(draw):
    """DDP929: DDP broadcasts rank 0's weights when it wraps; a random draw after the wrap gives
    each rank weights of its own, which averaged gradients never bring together. A draw
    before the wrap, or a constant fill after it, is fine."""
    init = "def init(m):\n    nn.init.xavier_uniform_(m.weight)\n\n\n"
    assert codes(ORIGINAL, init + planted(WRAP, WRAP + draw)) == ["DDP929"]
    assert codes(ORIGINAL, init + planted(WRAP, draw.replace("model.module", "model").replace(
        'getattr(model, "module", model)', "model") + WRAP)) == []
    assert codes(ORIGINAL, planted(WRAP, WRAP + "nn.init.zeros_(model.module.bias)\n")) == []
    # ddpify's own output for such a script draws the weights before the wrap.
    original, expected, diagnostics = fixture("model/weights_drawn_by_a_module_loop_after_the_move")
    assert codes(original, expected, diagnostics) == []


def test_a_move_of_a_wrapped_model_on_rank0_only_is_found():
    """DDP916: `model.to(device)` in a `with open(...)` block guarded whole for its write: the
    other ranks wrap the model where it was (DDP refuses a CPU module with device_ids on a
    GPU; Gloo lets it pass). ddpify's own output keeps the block on every rank, writing to
    os.devnull there."""
    original, expected, diagnostics = fixture("side_effects/model_moved_in_the_block_that_writes_its_summary")
    assert codes(original, expected, diagnostics) == []
    block = 'with open("summary.txt" if is_main else os.devnull, "w") as f:\n    if is_main:\n' \
        '        print(model, file=f)\n    model = model.to(device)\n'
    guarded = 'if is_main:\n    with open("summary.txt", "w") as f:\n        print(model, file=f)\n' \
        '        model = model.to(device)\n'
    assert codes(original, planted(block, guarded, expected), diagnostics) == ["DDP916"]


# DDP932: the module DDP wraps is one an optimizer of the script steps. A distillation script:
# the teacher runs with gradients on and its logits are detached, so a wrapped teacher would
# leave DDP waiting for its gradients and raise at the next forward.
_DISTILLING = planted("model = nn.Linear(10, 2)\nmodel.to(device)\n",
                      "model = nn.Linear(10, 2)\nmodel.to(device)\nteacher = nn.Linear(10, 2).to(device)\n",
                      ORIGINAL).replace("cross_entropy(model(x), y)", "mse_loss(model(x), teacher(x).detach())")
_DISTILLED = planted("model = nn.Linear(10, 2)\nmodel.to(device)\n",
                     "model = nn.Linear(10, 2)\nmodel.to(device)\nteacher = nn.Linear(10, 2).to(device)\n"
                     ).replace("cross_entropy(model(x), y)", "mse_loss(model(x), teacher(x).detach())")
_TEACHER_WRAPPED = "if distributed:\n    teacher = DDP(teacher, device_ids=None)\n"


def test_the_distilled_output_with_the_student_wrapped_passes():
    assert codes(_DISTILLING, _DISTILLED) == []


@pytest.mark.parametrize("where", ["beside", "instead"])
def test_a_wrapped_teacher_that_no_optimizer_steps_is_found(where):
    wrong = planted("optimizer = torch", _TEACHER_WRAPPED + "optimizer = torch", _DISTILLED)
    if where == "instead":
        wrong = wrong.replace(WRAP, "")
    assert "DDP932" in codes(_DISTILLING, wrong)


@pytest.mark.parametrize("params", [
    "[{\"params\": filter(lambda p: p.requires_grad, teacher.parameters())}]",
    "[p for p in teacher.parameters() if p.requires_grad]",
    "itertools.chain(model.parameters(), teacher.parameters())",
    "teacher_params",
])
def test_a_wrapped_module_an_optimizer_steps_in_any_spelling_passes(params):
    """Param groups, filter(lambda ...), a comprehension, itertools.chain of two models, a list
    built beforehand: each is followed to the module whose parameters it hands over (here the
    teacher is the one trained, and the one wrapped)."""
    migrated = planted("optimizer = torch", _TEACHER_WRAPPED + "teacher_params = list(teacher.parameters())\n"
                       "optimizer = torch", _DISTILLED).replace(WRAP, "")
    migrated = planted("torch.optim.SGD(model.parameters(), lr=0.1)", f"torch.optim.SGD({params}, lr=0.1)",
                       migrated)
    assert "DDP932" not in codes(_DISTILLING, migrated)


def test_a_module_stepped_through_a_param_group_added_later_passes():
    """`optimizer.add_param_group({"params": teacher.parameters()})` after the optimizer is made."""
    migrated = planted("optimizer = torch", _TEACHER_WRAPPED + "optimizer = torch", _DISTILLED)
    migrated = planted("lr=0.1)\n", "lr=0.1)\noptimizer.add_param_group({\"params\": teacher.parameters()})\n",
                       migrated)
    assert "DDP932" not in codes(_DISTILLING, migrated)
    assert "DDP932" in codes(_DISTILLING, migrated.replace("optimizer.add_param_group", "print"))


def test_a_module_stepped_through_an_alias_or_a_part_passes():
    """`net = model.to(device)` then `SGD(net.parameters())`, or `SGD(model.head.parameters())`."""
    alias = planted("optimizer = torch.optim.SGD(model.parameters()",
                    "net = model\noptimizer = torch.optim.SGD(net.parameters()", _DISTILLED)
    part = planted("SGD(model.parameters()", "SGD(model.weight_groups.parameters()", _DISTILLED)
    assert "DDP932" not in codes(_DISTILLING, alias) + codes(_DISTILLING, part)


def test_an_optimizer_this_reading_cannot_follow_says_nothing():
    """`SGD(groups(teacher))`, or over a parameter of the function it is built in: the module it
    trains is not in sight, so no wrap is called untrained."""
    helper = planted("SGD(model.parameters()", "SGD(make_groups(model)", planted(
        "optimizer = torch", _TEACHER_WRAPPED + "optimizer = torch", _DISTILLED))
    assert "DDP932" not in codes(_DISTILLING, helper)


_PREVIEW = ("def preview():\n    model.cpu()\n    with torch.no_grad():\n        print(model(torch.randn(1, 10)))\n"
            "    model.to(device)\n\n\n")


def test_a_function_moving_the_wrapped_model_between_trainings_is_found():
    """DDP911: `preview()` moves the global model to the CPU and back, called in the epoch loop
    after the wrap: the wrapper's parameters leave the device DDP was built on (its forward with
    device_ids then meets CPU parameters on a GPU). Called once training is over, it is harmless."""
    original = planted("model = nn.Linear(10, 2)\n", _PREVIEW + "model = nn.Linear(10, 2)\n", ORIGINAL)
    original = planted('    torch.save(model.state_dict(), "model.pt")\n',
                       '    torch.save(model.state_dict(), "model.pt")\n    preview()\n', original)
    migrated = planted("model = nn.Linear(10, 2)\n", _PREVIEW + "model = nn.Linear(10, 2)\n")
    in_the_loop = planted('        torch.save(getattr(model, "module", model).state_dict(), "model.pt")\n',
                          '        torch.save(getattr(model, "module", model).state_dict(), "model.pt")\n'
                          '    preview()\n', migrated)
    assert "DDP911" in codes(original, in_the_loop)
    after_training = planted("\nif distributed:\n    dist.destroy_process_group()\n",
                             "preview()\n\nif distributed:\n    dist.destroy_process_group()\n", migrated)
    assert "DDP911" not in codes(original, after_training)


@pytest.mark.parametrize("original_move, kept, deleted", [
    # one line of several moves under a CUDA flag, one of them gone
    ("if device != 'cpu':\n    model.cuda(); criterion.cuda()\n",
     "if device != 'cpu':\n    model.to(device); criterion.to(device)\n",
     "if device != 'cpu':\n    criterion.to(device)\n"),
    # a tuple assignment, the model's move dropped from it
    ("model, criterion = model.cuda(), criterion.cuda()\n",
     "model, criterion = model.to(device), criterion.to(device)\n",
     "model, criterion = model, criterion.to(device)\n"),
    # a move by keyword, and one to a GPU index
    ("model.to(device=device)\ncriterion.to(device)\n", "model.to(device=device)\ncriterion.to(device)\n",
     "criterion.to(device)\n"),
    ("model.cuda(args.gpu)\ncriterion.to(device)\n", "model.to(device)\ncriterion.to(device)\n",
     "criterion.to(device)\n"),
])
def test_a_deleted_move_of_the_model_is_found_in_each_spelling(original_move, kept, deleted):
    """DDP910: the user's move of the model is respelled for this rank, never dropped; a wrap
    after a move that is gone wraps a CPU module (NCCL refuses it)."""
    criterion = "criterion = nn.CrossEntropyLoss()\n"
    original = planted("model.to(device)\n", criterion + original_move, ORIGINAL)
    if "args.gpu" in original_move:
        original = "import argparse\nargs = argparse.Namespace(gpu=0)\n" + original
    good = planted("model.to(device)\n", criterion + kept)
    bad = planted("model.to(device)\n", criterion + deleted)
    assert "DDP910" not in codes(original, good)
    assert "DDP910" in codes(original, bad)




@pytest.mark.parametrize("case, sampler_keyword, loader_line, evaluation_lines", [
    # The step closure a factory makes, handed to the function whose loop goes over the loader.
    ("step_closure_from_a_factory_handed_to_the_train_function", "        sampler=train_sampler,\n", 47, [48]),
    # A step function of the file handed to a pass shared with the evaluation step.
    ("step_function_handed_to_a_shared_pass_with_an_eval_step", "        sampler=train_data_sampler,\n", 37, [38]),
    # A bound method of a class that steps, and functools.partial of a function that steps.
    ("bound_step_method_and_partial_handed_to_fit", ", sampler=sampler)", 39, []),
    ("bound_step_method_and_partial_handed_to_fit", ", sampler=head_sampler)", 40, []),
    # Step closures from two factories handed to one batch pass (Deep Learning with PyTorch Step-by-Step's shape).
    ("step_closures_from_factories_handed_to_one_shared_batch_pass", ", sampler=train_sampler\n", 38, [39]),
    # Closures of main handed to a method of a class of the file, called on its object.
    ("step_closures_of_main_handed_to_a_runner_method", "        sampler=train_sampler,\n", 34, [35]),
    # Passes written in one expression: a comprehension of steps, map() of a step, a sum of a
    # generator of steps in a train function; and a loop pulling a generator method that steps.
    ("epoch_pass_written_as_a_list_comprehension_of_train_steps", ", sampler=sampler)", 19, []),
    ("epoch_pass_mapped_over_the_loader", ", sampler=sampler)", 8, []),
    ("epoch_pass_summed_by_a_generator_of_steps_in_a_train_function", ", sampler=train_sampler\n", 30, []),
    ("training_generator_method_pulled_by_the_loop_of_each_epoch", ", sampler=sampler)", 27, []),
])
def test_a_loader_whose_pass_steps_through_a_handed_function_is_not_left_whole(case, sampler_keyword, loader_line,
                                                                              evaluation_lines):
    """The output of an analysis that took the training loader for an evaluation one
    (MLPA-DKU/GazeEstimation's shape): the self-check's own reading sees the step."""
    original = (FIXTURES / "data" / case / "input.py").read_text()
    expected = (FIXTURES / "data" / case / "expected.py").read_text()
    # The evaluation loader, left whole (DDP203), passes: the step function it is handed does not step.
    left_whole = [Diagnostic("DDP203", line, 10, "left whole") for line in [loader_line, *evaluation_lines]]
    assert codes(original, expected, left_whole) == []
    # The keyword dropped, with its own line, or with what follows it on the loader's line kept.
    broken = planted(sampler_keyword, sampler_keyword[-1] if sampler_keyword.startswith(",") else "", expected)
    assert codes(original, broken, left_whole) == ["DDP938"]


@pytest.mark.parametrize("case, sampler_keyword, loader_line", [
    ("while_step_loop_draws_from_an_endless_generator", ", sampler=sampler)", 7),
    ("while_iteration_loop_in_main_draws_from_an_infinite_batches_generator", "        sampler=train_sampler,\n", 15),
])
def test_a_loader_drawn_with_next_by_a_while_step_loop_is_not_left_whole(case, sampler_keyword, loader_line):
    """`batches = endless(loader)`, then `while step < n: x, y = next(batches)` stepping the
    optimizer: the output of an analysis that read the generator's own `for` as an evaluation
    pass and left the loader whole (ddpify before this check's rule) fails the self-check."""
    original = (FIXTURES / "data" / case / "input.py").read_text()
    expected = (FIXTURES / "data" / case / "expected.py").read_text()
    left_whole = [Diagnostic("DDP203", loader_line, 10, "left whole")]
    assert "DDP938" not in codes(original, expected, left_whole)
    broken = planted(sampler_keyword, sampler_keyword[-1] if sampler_keyword.startswith(",") else "", expected)
    assert "DDP938" in codes(original, broken, left_whole)


# Fixtures whose output waits, in a loop or before a delete, for what rank 0 wrote or what every
# rank read (DDP323, DDP324); without those barriers (main's output before they were placed)
# another rank reads a file rank 0 is still writing, or loses one it is still reading.
RACED = ["best_weights_reloaded_at_the_next_epoch_when_validation_gets_worse",
         "teacher_saved_by_a_helper_each_epoch_reloaded_at_the_next_start",
         "latest_weights_saved_every_few_steps_scored_at_each_epoch_start",
         "epoch_statistics_in_json_and_text_read_back_at_the_next_epoch",
         "checkpoint_read_back_in_its_epoch_keeping_the_last_two",
         "scratch_folder_removed_after_every_rank_reloads_the_best",
         "best_file_loaded_for_the_test_then_removed",
         "best_weights_reloaded_after_training_in_each_seed_of_a_seed_loop"]


@pytest.mark.parametrize("name", RACED)
def test_a_file_race_without_its_barrier_is_found(name):
    folder = FIXTURES / "checkpoints" / name
    original, migrated = (folder / "input.py").read_text(), (folder / "expected.py").read_text()
    assert "DDP941" not in codes(original, migrated)
    barrier = re.compile(r"^( *)if distributed:\n\1    dist\.barrier\(\)  "
                         r"# (rank 0 has finished|every rank has read).*\n", re.MULTILINE)
    assert barrier.search(migrated)
    assert "DDP941" in codes(original, barrier.sub("", migrated))
def test_a_gather_over_each_ranks_first_batches_is_found():
    """DDP947: the dry-run fixture's output keeps rank 0's batch when `args.dry_run` stops the
    test loop after one batch; without that line, the gathered figures cover one batch per rank,
    where one process evaluated one. main's output of the zip(range(k), loader) fixture (before
    the loader was kept whole) is found too."""
    fixture = FIXTURES / "evaluation" / "test_loop_stops_after_one_batch_under_a_dry_run_flag"
    original, migrated = (fixture / "input.py").read_text(), (fixture / "expected.py").read_text()
    assert "DDP947" not in {d.code for d in check(original, migrated, [])}
    kept = "                shares = shares[:1]\n"
    broken = migrated.replace(kept, "                pass\n", 1)
    assert broken != migrated
    assert "DDP947" in {d.code for d in check(original, broken, [])}
    zipped = migrated.replace("        for data, target in test_loader:",
                              "        for _, (data, target) in zip(range(3), test_loader):")
    assert "DDP947" in {d.code for d in check(original, zipped, [])}


PRUNED = ["oldest_checkpoints_unlinked_while_more_than_the_limit",
          "saved_paths_listed_and_removed_while_over_the_limit",
          "step_folders_pruned_from_a_deque_while_over_the_limit",
          "trainer_prunes_old_checkpoints_while_over_the_limit_and_logs_each"]


@pytest.mark.parametrize("name", PRUNED)
def test_a_loop_only_rank0_can_end_is_found(name):
    """DDP952: each fixture's output guards the whole `while len(saved) > keep:` pruning loop;
    main's output before races22 guarded the statement inside it (the pop that ends the loop
    ran on rank 0 alone, and the other ranks looped forever: both runs killed after 60 s)."""
    folder = FIXTURES / "checkpoints" / name
    original, migrated = (folder / "input.py").read_text(), (folder / "expected.py").read_text()
    assert "DDP952" not in codes(original, migrated)
    guard_outside = re.compile(r"^( *)if (is_main\w*(?:\(\))?):\n\1    (while .*:)\n\1        (.*)\n"
                               r"((?:\1        logger.*\n)?)", re.MULTILINE)
    broken = guard_outside.sub(r"\1\3\n\1    if \2:\n\1        \4\n\5", migrated)
    assert broken != migrated
    assert "DDP952" in codes(original, broken)


SHAPE_MATCHED_DELETES = ["last_epochs_averaged_then_their_files_globbed_away",
                         "best_path_bound_once_reloaded_then_its_run_folder_removed",
                         "best_file_under_a_path_folder_reloaded_then_the_folder_unlinked"]


@pytest.mark.parametrize("name", SHAPE_MATCHED_DELETES)
def test_a_delete_of_what_ranks_read_under_another_spelling_is_found(name):
    """DDP941 by the paths' shapes: a glob's loop variable, a name bound once, pathlib's unlink.
    main's output before races22 had no barrier between the read and rank 0's delete (rank 1
    slowed by 2 s before its read: FileNotFoundError in all three)."""
    folder = FIXTURES / "checkpoints" / name
    original, migrated = (folder / "input.py").read_text(), (folder / "expected.py").read_text()
    assert "DDP941" not in codes(original, migrated)
    barrier = re.compile(r"^( *)if distributed:\n\1    dist\.barrier\(\)  # every rank has read.*\n", re.MULTILINE)
    assert barrier.search(migrated)
    assert "DDP941" in codes(original, barrier.sub("", migrated))
