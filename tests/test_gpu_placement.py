"""GPU placement of scripts that choose no device (rules/gpu_placement.py) and its self-check
(DDP949, selfcheck/placed_factories.py): what stops the placement, and a broken placed output
that the self-check catches."""
import ast

import pytest

from ddpify.analysis import batch_parts
from ddpify.api import migrate_source
from ddpify.rules import gpu_placement
from ddpify.selfcheck.placed_factories import factories_on_the_placed_path
from ddpify.selfcheck.placed_parts import non_tensors_moved

HEAD = """import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4, shuffle=True)
"""
LOOP = """optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for x, y in loader:
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
"""


def _placement(middle: str, loop: str = LOOP):
    code = HEAD + middle + loop
    return gpu_placement.place(code, ast.parse(code))


def test_a_plain_model_is_placed_and_each_batch_moved():
    placed = _placement("model = nn.Linear(4, 1)\n")
    assert isinstance(placed, gpu_placement.Placed)
    assert "model.to(device)\n" in placed.code
    assert "        x, y = x.to(device), y.to(device)\n" in placed.code
    assert placed.to_original(placed.code.splitlines().index("model.to(device)") + 1) == 6


@pytest.mark.parametrize("middle, loop, stopped_at", [
    # A plain tensor attribute of the model: not a buffer, it stays on the CPU.
    ("class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
     "        self.fc = nn.Linear(4, 1)\n        self.shift = torch.ones(1)\n\n"
     "    def forward(self, x):\n        return self.fc(x) + self.shift\n\n\nmodel = Net()\n", LOOP, 10),
    # A tensor made at the top level and read where the model meets the batches.
    ("model = nn.Linear(4, 1)\nscale = torch.tensor(2.0)\n",
     LOOP.replace("model(x), y", "model(x) * scale, y"), 7),
    # A callable ddpify cannot see made (a metric object that keeps its own tensors).
    ("import metrics\nmodel = nn.Linear(4, 1)\nscore = metrics.Score()\n",
     LOOP.replace("optimizer.step()\n", "optimizer.step()\n        score(model(x), y)\n"), 8),
    # A batch value handed to numpy.
    ("import numpy as np\nmodel = nn.Linear(4, 1)\n",
     LOOP.replace("optimizer.step()\n", "optimizer.step()\n        np.save('out.npy', x)\n"), 15),
])
def test_what_is_not_certain_keeps_the_script_on_the_cpu(middle, loop, stopped_at):
    found = _placement(middle, loop)
    assert isinstance(found, gpu_placement.Uncertain)
    assert found.line == stopped_at


def test_a_script_that_names_a_device_is_left_to_its_own_choice():
    found = _placement("model = nn.Linear(4, 1).to('cpu')\n")
    assert isinstance(found, gpu_placement.Uncertain) and found.line == 6 and "`.to(`" in found.reason


def test_ddp011_names_the_line_that_keeps_the_script_on_the_cpu():
    loop = LOOP.replace("model(x), y", "model(x) * scale, y")
    code = HEAD + "model = nn.Linear(4, 1)\nscale = torch.tensor(2.0)\n" + loop
    messages = [d.message for d in migrate_source(code).diagnostics if d.code == "DDP011"]
    assert len(messages) == 1 and messages[0].endswith("make it on `device`, or move it there")
    assert "line 7: `scale`" in messages[0]


BROKEN_OUTPUT = """import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.RNN(4, 8)
        self.register_buffer("scale", torch.ones(8))

    def forward(self, x):
        state = torch.zeros(1, x.size(1), 8)
        return self.rnn(x, state)[0] * self.scale


def train(model, loader, device):
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        mask = torch.ones(x.size(0))
        model(x).sum().backward()
"""


def test_the_self_check_finds_factories_without_a_device_on_the_placed_path():
    assert [line for line, _ in factories_on_the_placed_path(ast.parse(BROKEN_OUTPUT))] == [12, 19]


def test_the_self_check_is_silent_where_every_factory_names_the_device():
    fixed = BROKEN_OUTPUT.replace("8)\n        return", "8, device=x.device)\n        return").replace(
        "torch.ones(x.size(0))", "torch.ones(x.size(0), device=device)")
    assert list(factories_on_the_placed_path(ast.parse(fixed))) == []


def test_a_part_of_the_batch_only_printed_or_collected_is_not_moved():
    loop = LOOP.replace("for x, y in loader:", "for x, y, names in loader:").replace(
        "optimizer.step()\n", "optimizer.step()\n        print(names[0])\n        seen.append(names)\n")
    placed = _placement("model = nn.Linear(4, 1)\nseen = []\n", loop)
    assert isinstance(placed, gpu_placement.Placed)
    assert "        x, y = x.to(device), y.to(device)\n" in placed.code


MOVED_FILE_NAMES = """import torch
from torch.utils.data import DataLoader, Dataset


class Files(Dataset):
    def __init__(self):
        self.images = torch.randn(8, 3)
        self.names = [f"{i}.png" for i in range(8)]

    def __len__(self):
        return 8

    def __getitem__(self, index):
        name = self.names[index].upper()
        return self.images[index], str(index), f"{name}", [name, index]


def train(model, device):
    loader = DataLoader(Files(), batch_size=4)
    for images, index, name, stem in loader:
        images, index, name, stem = images.to(device), index.to(device), name.to(device), stem
        stem = stem.cuda()
        model(images).sum().backward()
"""


def test_the_self_check_finds_a_part_made_of_strings_moved_with_to():
    assert [line for line, _ in non_tensors_moved(ast.parse(MOVED_FILE_NAMES))] == [21, 21, 22]


def test_the_self_check_is_silent_where_only_tensors_are_moved():
    fixed = MOVED_FILE_NAMES.replace(", index.to(device), name.to(device), stem", ", index, name, stem").replace(
        "        stem = stem.cuda()\n", "")
    assert list(non_tensors_moved(ast.parse(fixed))) == []


def test_parts_read_from_the_dataset_decide_what_the_placement_moves():
    dataset = MOVED_FILE_NAMES.split("def train")[0].replace("import torch\n", "import torch\nimport torch.nn as nn\n")
    loop = ("model = nn.Linear(3, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
            "loader = DataLoader(Files(), batch_size=4)\nfor images, index, name, stem in loader:\n"
            "    loss = model(images).sum() + len(index)\n    opt.zero_grad()\n    loss.backward()\n"
            "    opt.step()\n    print(name + stem[0])\n")
    source = dataset + loop
    placed = gpu_placement.place(source, ast.parse(source))
    assert isinstance(placed, gpu_placement.Uncertain) and "`stem` is a list" in placed.reason
    source = source.replace(", [name, index]", "").replace(", stem in", " in").replace(" + stem[0]", "")
    placed = gpu_placement.place(source, ast.parse(source))
    assert isinstance(placed, gpu_placement.Placed), placed
    assert "    images = images.to(device)\n" in placed.code


_LISTED = ("class MLP(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
           "        self.layers = [nn.Linear(4, 8), nn.Linear(8, 1)]\n{registered}\n"
           "    def forward(self, x):\n        return {forward}\n\n\nmodel = MLP()\n")


def test_modules_in_a_plain_list_stop_the_placement_unless_a_container_registers_them():
    found = _placement(_LISTED.format(registered="", forward="self.layers[1](self.layers[0](x))"))
    assert isinstance(found, gpu_placement.Uncertain) and "nn.ModuleList" in found.reason
    placed = _placement(_LISTED.format(registered="        self.net = nn.Sequential(*self.layers)\n",
                                       forward="self.net(x)"))
    assert isinstance(placed, gpu_placement.Placed), placed


def test_a_method_of_the_model_computing_outside_a_pass_stops_the_placement_and_bookkeeping_does_not():
    found = _placement("model = nn.Linear(4, 1)\n", LOOP + "print(model.forward(torch.ones(1, 4)))\n")
    assert isinstance(found, gpu_placement.Uncertain) and "`model.forward` is called outside" in found.reason
    placed = _placement("model = nn.Linear(4, 1)\n", LOOP + "model.eval()\nprint(model.state_dict())\n")
    assert isinstance(placed, gpu_placement.Placed), placed


def test_batch_parts_come_from_a_collate_function_or_a_collator_class():
    source = ("import torch\nfrom torch.utils.data import DataLoader\n\n\nclass Collator:\n"
              "    def __call__(self, batch):\n        ids = [row[0] for row in batch]\n"
              "        return torch.stack([row[1] for row in batch]), ids, \"batch\", 3\n\n\n"
              "def collate(batch):\n    return Collator()(batch)\n\n\n"
              "by_class = DataLoader([], collate_fn=Collator())\nby_function = DataLoader([], collate_fn=collate)\n")
    tree = ast.parse(source)
    parts = batch_parts.BatchParts(tree, lambda node: ast.unparse(node))
    loaders = [node.value for node in tree.body if isinstance(node, ast.Assign)]
    assert parts.of_loader(loaders[0], None) == [batch_parts.TENSOR, batch_parts.CONTAINER, batch_parts.HOST,
                                                 batch_parts.HOST]
    assert parts.of_loader(loaders[1], None) is None  # (what `collate` returns is no tuple ddpify can read)


def test_an_image_folder_subclass_returns_its_paths_as_strings():
    source = ("import torchvision\nfrom torch.utils.data import DataLoader\n\n\n"
              "class WithPaths(torchvision.datasets.ImageFolder):\n    def __getitem__(self, index):\n"
              "        path, target = self.samples[index]\n"
              "        return self.transform(self.loader(path)), target, path\n"
              "\n\nclass AddedPath(torchvision.datasets.ImageFolder):\n    def __getitem__(self, index):\n"
              "        return super().__getitem__(index) + (self.imgs[index][0],)\n\n\n"
              "unpacked = DataLoader(WithPaths('data'))\nadded = DataLoader(AddedPath('data'))\n")
    tree = ast.parse(source)
    parts = batch_parts.BatchParts(tree, lambda node: ast.unparse(node))
    unpacked, added = [node.value for node in tree.body if isinstance(node, ast.Assign)]
    assert parts.of_loader(unpacked, "WithPaths") == [None, batch_parts.TENSOR, batch_parts.HOST]
    assert parts.of_loader(added, "AddedPath") == [None, batch_parts.TENSOR, batch_parts.HOST]
