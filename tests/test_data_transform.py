"""Edge cases of data.py that a fixture would be overkill for: names, shuffle forms, roles."""
from ddpify.analysis.facts import Loader
from ddpify.api import migrate_source
from ddpify.rules.data import derived_name

HEADER = """\
import torch
from torch.utils.data import DataLoader, RandomSampler, TensorDataset

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = torch.nn.Linear(4, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
dataset = TensorDataset(torch.randn(8, 4), torch.randn(8, 1))
"""

LOOP = """\
for epoch in range(2):
    for x, y in {loader}:
        loss = ((model(x) - y) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def migrate(loader_code: str, loader: str = "train_loader"):
    result = migrate_source(HEADER + loader_code + LOOP.format(loader=loader))
    return result.code, {d.code for d in result.diagnostics}


def loader(name: str) -> Loader:
    return Loader(name, None, None, None, None, {})


def test_derived_names():
    assert derived_name(loader("train_loader"), "sampler", set()) == "train_sampler"
    assert derived_name(loader("loader"), "sampler", set()) == "sampler"
    assert derived_name(loader("trainloader"), "sampler", set()) == "train_sampler"
    assert derived_name(loader("train_dl"), "sampler", set()) == "train_dl_sampler"
    assert derived_name(loader("self.train_loader"), "sampler", set()) == "self.train_sampler"
    assert derived_name(loader("train_loader"), "dataset", set()) == "train_dataset"


def test_derived_name_avoids_taken_names():
    assert derived_name(loader("loader"), "sampler", {"sampler"}) == "sampler_"


def test_shuffle_literal_true_moves_to_the_sampler():
    code, codes = migrate("train_loader = DataLoader(dataset, batch_size=2, shuffle=True)\n")
    assert "DistributedSampler(dataset, shuffle=True) if distributed else None" in code
    assert "shuffle=train_sampler is None, sampler=train_sampler" in code
    assert "train_sampler.set_epoch(epoch)" in code
    assert "DDP201" in codes


def test_shuffle_variable_stays_the_fallback():
    code, _ = migrate("train_loader = DataLoader(dataset, batch_size=2, shuffle=flag)\n")
    assert "DistributedSampler(dataset, shuffle=flag)" in code
    assert "shuffle=flag and train_sampler is None" in code


def test_training_loader_without_shuffle_is_sharded_in_order():
    code, codes = migrate("train_loader = DataLoader(dataset, batch_size=2)\n")
    assert "DistributedSampler(dataset, shuffle=False) if distributed else None" in code
    assert "DataLoader(dataset, batch_size=2, sampler=train_sampler)" in code
    # set_epoch only reseeds the shuffle: nothing to do without one.
    assert "set_epoch" not in code
    assert "DDP203" not in codes


def test_loader_kwargs_hand_shuffle_to_the_sampler():
    code, _ = migrate(
        'kwargs = {"batch_size": 2, "shuffle": True}\n'
        "train_loader = DataLoader(dataset, **kwargs)\n"
    )
    assert 'DistributedSampler(dataset, shuffle=kwargs.pop("shuffle", False))' in code
    assert "DataLoader(dataset, sampler=train_sampler, **kwargs)" in code
    assert "train_sampler.set_epoch(epoch)" in code


def test_loader_kwargs_with_a_sampler_key_are_reported():
    _, codes = migrate(
        'kwargs = {"batch_size": 2}\n'
        'extra = {"sampler": RandomSampler(dataset, replacement=True)}\n'
        "kwargs.update(extra)\n"
        "train_loader = DataLoader(dataset, **kwargs)\n"
    )
    assert "DDP207" in codes


def test_inline_random_sampler_is_hoisted_and_wrapped():
    code, codes = migrate(
        "train_loader = DataLoader(dataset, sampler=RandomSampler(dataset), batch_size=2)\n"
    )
    assert "train_sampler = DistributedSampler(dataset) if distributed else RandomSampler(dataset)" in code
    assert "DataLoader(dataset, sampler=train_sampler, batch_size=2)" in code
    assert "if distributed:\n        train_sampler.set_epoch(epoch)" in code
    assert "DDP207" not in codes


def test_random_sampler_with_a_generator_is_sharded_by_the_wrapper():
    """DistributedSampler has no twin for generator= (or replacement=): each rank takes its
    share of what the sampler draws, seeded alike by the epoch under torchrun."""
    code, codes = migrate(
        "g = torch.Generator()\n"
        "train_loader = DataLoader(dataset, sampler=RandomSampler(dataset, generator=g))\n"
    )
    assert "DDP207" not in codes and "DDP201" in codes
    assert "train_sampler = RandomSampler(dataset, generator=g)\n" in code
    assert "sampler=DistributedSamplerWrapper(train_sampler) if distributed else train_sampler" in code


def test_loader_not_iterated_here_is_judged_by_its_name():
    result = migrate_source(HEADER + "val_loader = DataLoader(dataset, shuffle=True)\n"
                            + "train_loader = DataLoader(dataset, shuffle=True)\n"
                            + LOOP.format(loader="train_loader"))
    assert "DDP203" in {d.code for d in result.diagnostics}


def test_training_on_hand_made_batches_only_leaves_the_file_single_process():
    source = HEADER + LOOP.format(loader="[(dataset[0][0], dataset[0][1])]")
    result = migrate_source(source)
    assert result.code == source
    assert {d.code for d in result.diagnostics} == {"DDP208", "DDP904"}


def test_loader_subclass_that_drops_sampler_is_reported():
    code, codes = migrate(
        "class FixedLoader(DataLoader):\n"
        "    def __init__(self, dataset, batch_size):\n"
        "        super().__init__(dataset, batch_size=batch_size, shuffle=True)\n"
        "train_loader = FixedLoader(dataset, 2)\n"
    )
    assert "DDP210" in codes
    assert "DistributedSampler" not in code


def test_download_outside_the_setup_scope_is_reported():
    body = "".join("    " + line + "\n" for line in (
        HEADER + "train_loader = torch.utils.data.DataLoader(dataset, shuffle=True)\n"
        + LOOP.format(loader="train_loader")).splitlines()[2:])
    result = migrate_source(
        "import torch\n"
        "def get_data():\n"
        "    return Digits('data', download=True)\n"
        "def main():\n" + body
        + "if __name__ == '__main__':\n    main()\n"
    )
    assert "DDP212" in {d.code for d in result.diagnostics}


def test_loader_names_resolve_through_every_import_form():
    """The import table: module aliases, from-imports with and without `as`."""
    for imports, call in (
        ("import torch.utils.data as tud\n", "tud.DataLoader"),
        ("from torch.utils import data\n", "data.DataLoader"),
        ("from torch.utils.data import DataLoader as DL\n", "DL"),
        ("import torch.utils.data\n", "torch.utils.data.DataLoader"),
    ):
        source = ("import torch\n" + imports
                  + f"loader = {call}(list(range(8)), batch_size=2, shuffle=True)\n"
                  + "model = torch.nn.Linear(1, 1)\n"
                  + "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
                  + "for epoch in range(2):\n    for x in loader:\n        optimizer.step()\n")
        assert "DistributedSampler(" in migrate_source(source).code, imports


RANDOM_DRAWS = """\
import torch

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
data = torch.randn(64, 4)
model = torch.nn.Linear(4, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
{generator}
for step in range(10):
    ix = torch.randint(len(data), (8,){keyword})
    loss = model(data[ix].to(device)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def test_batches_drawn_from_the_global_generator_get_a_seed_per_rank():
    result = migrate_source(RANDOM_DRAWS.format(generator="", keyword=""))
    assert "torch.manual_seed(torch.initial_seed() + dist.get_rank())" in result.code
    assert "DDP219" in [d.code for d in result.diagnostics]
    assert not result.needs_a_person


def test_batches_drawn_from_a_generator_of_the_scripts_own_stay_reported():
    source = RANDOM_DRAWS.format(generator="g = torch.Generator().manual_seed(0)", keyword=", generator=g")
    result = migrate_source(source)
    assert result.code == source
    assert {"DDP208", "DDP904"} <= {d.code for d in result.diagnostics}
