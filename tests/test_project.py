"""The project view: what the functions of a script's own modules do (ddpify/project.py,
ddpify/analysis/effects.py), and what the migration does with calls of them."""
import textwrap

import pytest

from ddpify import project
from ddpify.analysis import effects
from ddpify.api import migrate_source

HELPERS = '''
import logging
import os
import sys

import numpy as np
import torch
from PIL import Image

logger = logging.getLogger(__name__)
history = []


def bar(current, total, message=""):
    sys.stdout.write(f"\\r{current + 1}/{total} {message}")
    sys.stdout.flush()


def say(message):
    print(message)


def note(message):
    logger.info(message)


def save(model, path):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    torch.save(model.state_dict(), path)


def to_csv(rows, path):
    with open(path, "w") as handle:
        for row in rows:
            handle.write(",".join(map(str, row)) + "\\n")


def save_picture(data, path):
    array = data.clone().clamp(0, 255).numpy().transpose(1, 2, 0).astype("uint8")
    Image.fromarray(array).save(path)
    img = Image.fromarray(np.asarray(array))
    img.save(path)


def read_text(path):
    with open(path) as handle:
        return handle.read()


def save_on_cpu(model, path):
    torch.save(model.cpu().state_dict(), path)


def norm(model):
    return sum(p.norm().item() for p in model.parameters())


def evaluate(model, x):
    return model(x).argmax(1)


def evaluate_and_print(model, x):
    print(evaluate(model, x))


def remember(value):
    history.append(value)


def update(meter, value):
    meter.update(value)


def step(optimizer):
    optimizer.step()


@torch.no_grad()
def decorated(message):
    print(message)


def call_back(fn, message):
    fn(message)
'''


@pytest.fixture
def script(tmp_path):
    (tmp_path / "helpers.py").write_text(HELPERS)
    return tmp_path / "train.py"


def effects_of(script, source):
    script.write_text(source)
    found = project.read(str(script), source)
    return {name: found.effect(f"helpers.{name}") for name in (
        "bar", "say", "note", "save", "to_csv", "save_picture", "read_text", "save_on_cpu", "norm",
        "evaluate",
        "evaluate_and_print", "remember", "update", "step", "decorated", "call_back")}


def test_each_helper_gets_its_effect(script):
    assert effects_of(script, "import helpers\n") == {
        "bar": effects.SPEAKS, "say": effects.SPEAKS, "note": effects.SPEAKS,
        "save": effects.WRITES, "to_csv": effects.WRITES, "save_picture": effects.WRITES,
        "read_text": effects.PURE,
        # `model.cpu()` moves the model it was handed: not on rank 0 alone.
        "save_on_cpu": None,
        "norm": effects.PURE,
        # It runs a callable it was handed (the model): every rank must call it.
        "evaluate": None, "evaluate_and_print": effects.MIXED,
        # Changes to state that outlives the call, or to an object it was handed.
        "remember": None, "update": None, "step": None,
        # A decorator may do anything; it prints as well, once per rank.
        "decorated": effects.MIXED, "call_back": None,
    }


def test_from_import_and_alias(script):
    source = "from helpers import bar, save as keep\n"
    script.write_text(source)
    found = project.read(str(script), source)
    assert found.effect("helpers.bar") == effects.SPEAKS
    assert found.effect("helpers.save") == effects.WRITES
    assert found.effect("torch.save") is None


def test_star_import_gives_bare_names(script):
    source = "from helpers import *\n"
    script.write_text(source)
    found = project.read(str(script), source)
    assert found.effect("say") == effects.SPEAKS
    assert found.effect("helpers.say") == effects.SPEAKS


def test_package_reexport_is_followed(tmp_path):
    package = tmp_path / "tools"
    package.mkdir()
    (package / "__init__.py").write_text("from .display import progress_bar\n")
    (package / "display.py").write_text("from .text import line\n\n\ndef progress_bar(i, n):\n"
                                        "    print(line(i, n))\n")
    (package / "text.py").write_text("def line(i, n):\n    return f'{i}/{n}'\n")
    source = "from tools import progress_bar\nimport tools.display\n"
    found = project.read(str(tmp_path / "train.py"), source)
    assert found.effect("tools.progress_bar") == effects.SPEAKS
    assert found.effect("tools.display.progress_bar") == effects.SPEAKS


def test_nothing_installed_is_read(tmp_path):
    installed = tmp_path / "lib" / "site-packages"
    installed.mkdir(parents=True)
    (installed / "helpers.py").write_text(HELPERS)
    found = project.read(str(installed / "train.py"), "import helpers\n")
    assert found.effect("helpers.say") is None


def test_a_helper_module_that_does_not_parse_is_no_helper(tmp_path):
    (tmp_path / "helpers.py").write_text("def say(message):\n    print(message\n")
    found = project.read(str(tmp_path / "train.py"), "import helpers\n")
    assert found.effect("helpers.say") is None


TRAIN = textwrap.dedent('''\
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset

    import helpers
    from helpers import *

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
    model = nn.Linear(4, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for step_index, (x, y) in enumerate(loader):
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
            bar(step_index, len(loader), f"{loss.item():.3f}")
        helpers.say(f"epoch {epoch} norm {helpers.norm(model):.3f}")
        helpers.save(model, "out/model.pt")
        helpers.evaluate_and_print(model, x)
''')


def test_migration_guards_helpers_that_print_or_write(script):
    script.write_text(TRAIN)
    result = migrate_source(TRAIN, project=project.read(str(script), TRAIN))
    assert "        if is_main:\n            bar(step_index" in result.code
    assert ('    if is_main:\n        helpers.say(f"epoch {epoch} norm '
            '{helpers.norm(getattr(model, \'module\', model))') in result.code
    assert '        helpers.save(getattr(model, "module", model), "out/model.pt")' in result.code
    # It runs the model: it stays on every rank, with the model as it is...
    assert "\n    helpers.evaluate_and_print(model, x)\n" in result.code
    codes = [d.code for d in result.diagnostics]
    assert codes.count("DDP301") == 2 and "DDP302" in codes and "DDP311" not in codes
    # ... and its print is guarded where it is written, in the helper module, migrated too,
    # with the model's run taken out of it: rank 0 alone would run a forward (and any gather
    # in it) that the other ranks never join.
    helpers = script.parent / "helpers.py"
    migrated = migrate_source(HELPERS, project=project.read(str(helpers), HELPERS))
    assert ("def evaluate_and_print(model, x):\n    evaluate_value = evaluate(model, x)\n"
            "    if is_main_process():\n        print(evaluate_value)\n") in migrated.code
    assert "DDP308" in [d.code for d in migrated.diagnostics]


def test_without_the_project_helpers_stay_as_they_were(script):
    result = migrate_source(TRAIN)
    assert "bar(step_index" in result.code and "if is_main:\n            bar(" not in result.code
    assert "DDP311" not in [d.code for d in result.diagnostics]


def test_a_function_of_the_script_shadows_a_star_imported_helper(script):
    source = TRAIN.replace("device = torch", "def bar(*args):\n    pass\n\n\ndevice = torch")
    script.write_text(source)
    result = migrate_source(source, project=project.read(str(script), source))
    assert "if is_main:\n            bar(" not in result.code


def test_a_helper_that_takes_training_steps_is_known(tmp_path):
    (tmp_path / "engine.py").write_text(
        "def step(model, x, optimizer):\n    model(x).sum().backward()\n    optimizer.step()\n\n\n"
        "def train_one_epoch(model, loader, optimizer):\n    for x in loader:\n"
        "        step(model, x, optimizer)\n\n\ndef evaluate(model, loader):\n"
        "    return [model(x) for x in loader]\n")
    found = project.read(str(tmp_path / "train.py"), "import engine\n")
    assert found.trains("engine.train_one_epoch") and found.trains("engine.step")
    assert not found.trains("engine.evaluate") and not found.trains("torch.save")


def test_loaders_made_in_another_module_are_sharded_there(tmp_path):
    """A DataLoader returned by a helper module (DDP208 "batches built by hand" once, then
    named in the report) is sharded in that module; the script sets its epoch."""
    helper = "from torch.utils.data import DataLoader\n\n\ndef get_loaders(n):\n" \
             "    loader = DataLoader(list(range(n)), batch_size=2, shuffle=True)\n" \
             "    return loader, None\n"
    (tmp_path / "data.py").write_text(helper)
    source = textwrap.dedent("""\
        import torch
        from data import get_loaders
        train_loader, _ = get_loaders(8)
        model = torch.nn.Linear(1, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(2):
            for x in train_loader:
                loss = model(x.float().view(-1, 1)).sum()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        """)
    (tmp_path / "train.py").write_text(source)
    result = migrate_source(source, project=project.read(str(tmp_path / "train.py"), source))
    assert "DDP208" not in [d.code for d in result.diagnostics]
    assert ('    if isinstance(getattr(train_loader, "sampler", None), DistributedSampler):\n'
            "        train_loader.sampler.set_epoch(epoch)\n") in result.code
    shard = migrate_source(helper, project=project.read(str(tmp_path / "data.py"), helper))
    assert "DistributedSampler(" in shard.code and "if dist.is_initialized()" in shard.code
    assert not shard.needs_a_person


TRAINER_MOVING_THE_MODEL = textwrap.dedent('''\
    import torch


    class Trainer:
        def __init__(self, model, optimizer, device):
            self.model = model.to(device)
            self.optimizer = optimizer

        def fit(self, loader, epochs):
            for epoch in range(epochs):
                for x, y in loader:
                    loss = torch.nn.functional.mse_loss(self.model(x), y)
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()
            torch.save(self.model.state_dict(), "model.pt")
    ''')

SCRIPT_HANDING_THE_MODEL = textwrap.dedent('''\
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from trainer import Trainer

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
    Trainer(model, optimizer, device).fit(loader, epochs=2)
    ''')


def test_a_trainer_that_moves_the_model_it_is_handed_wraps_it_after_the_move(tmp_path):
    """The wrap goes where the model reaches its device, in whichever module that is: not in
    the script, before the Trainer moves it (a DDP wrap of a CPU module fails on a GPU)."""
    (tmp_path / "trainer.py").write_text(TRAINER_MOVING_THE_MODEL)
    (tmp_path / "train.py").write_text(SCRIPT_HANDING_THE_MODEL)
    script = migrate_source(SCRIPT_HANDING_THE_MODEL,
                            project=project.read(str(tmp_path / "train.py"), SCRIPT_HANDING_THE_MODEL))
    assert "DDP(" not in script.code and "dist.init_process_group" in script.code
    helper = migrate_source(TRAINER_MOVING_THE_MODEL,
                            project=project.read(str(tmp_path / "trainer.py"), TRAINER_MOVING_THE_MODEL))
    assert ("        self.model = model.to(device)\n        if dist.is_initialized():\n"
            "            self.model = DDP(self.model)\n") in helper.code
    assert 'torch.save(getattr(self.model, "module", self.model).state_dict(), "model.pt")' in helper.code


GUARDING = '''\
import json
import logging
import os

import imageio
import torch

logger = logging.getLogger(__name__)


def say(message):
    print(message)


def save_json(path, record):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(record, f)


def through_say(message):
    say(message)


def logs(message):
    logger.info(message)


def returns_save(state, path):
    return torch.save(state, path)


def assigned(message):
    shown = print(message)
    return shown


def animates(paths, out):
    frames = [imageio.imread(path) for path in paths]
    imageio.mimsave(out, frames)


def through_logs(message):
    logs(message)


class Saver:
    def save(self, state, path):
        torch.save(state, path)
        self.say(path)

    def say(self, path):
        print("saved", path)
'''


def test_which_helpers_guard_their_own_output_once_their_module_is_migrated(tmp_path):
    """Each print or write a statement that the helper's own migration guards (a call
    statement, a `with open(path, "w")` block, a `return torch.save(...)` that ends the
    function) - not a log call, a write in an assignment, nor a helper that also reads files
    (rank 0's, maybe not written yet)."""
    (tmp_path / "helpers.py").write_text(GUARDING)
    # (The helper's module is migrated only for what other modules use of it.)
    source = ("from helpers import say, save_json, through_say, logs, returns_save, assigned, animates, "
              "through_logs, Saver\n")
    (tmp_path / "train.py").write_text(source)
    alone = project.read(str(tmp_path / "train.py"), source)
    together = project.read(str(tmp_path / "train.py"), source, [str(tmp_path / "helpers.py")])
    names = ["say", "save_json", "through_say", "logs", "returns_save", "assigned", "animates", "through_logs",
             "Saver.save"]
    assert {name for name in names if together.guards_own_output(f"helpers.{name}")} == {
        "say", "save_json", "through_say", "returns_save", "Saver.save"}
    # Not migrated in this run: its callers guard it.
    assert not any(alone.guards_own_output(f"helpers.{name}") for name in names)
    # Migrated in this run, but nothing imports `say` by name: the helper's migration leaves
    # it as it is (its view finds no user), so the caller keeps its guard.
    (tmp_path / "train.py").write_text("import helpers\nhelpers.save_json({}, 'x.json')\n")
    partly = project.read(str(tmp_path / "train.py"), "import helpers\nhelpers.save_json({}, 'x.json')\n",
                          [str(tmp_path / "helpers.py")])
    assert partly.guards_own_output("helpers.save_json") and not partly.guards_own_output("helpers.say")


def test_one_reading_of_the_modules_serves_every_module_of_one_project_state(tmp_path):
    """project._modules_of: what one module's migration learns of a helper, the next one's reuses;
    a changed file starts a new reading."""
    (tmp_path / "utils.py").write_text("def accuracy(out, y):\n    return (out.argmax(1) == y).float().mean()\n")
    for name in ("train.py", "evaluate.py"):
        (tmp_path / name).write_text("import torch\nfrom utils import accuracy\n")
    views = [project.read(str(tmp_path / name), (tmp_path / name).read_text()) for name in ("train.py", "evaluate.py")]
    assert views[0]._modules is views[1]._modules
    (tmp_path / "utils.py").write_text("def accuracy(out, y):\n    return (out.argmax(1) == y).sum()\n")
    again = project.read(str(tmp_path / "train.py"), (tmp_path / "train.py").read_text())
    assert again._modules is not views[0]._modules
