"""Value flow in analysis: roles follow values through returns, calls, constructors,
`self` attributes and module globals, not variable names."""
import libcst as cst
from libcst.metadata import MetadataWrapper

from ddpify.analysis.reading import analyse


def facts_of(code: str):
    return analyse(MetadataWrapper(cst.parse_module(code), unsafe_skip_copy=True))


TRAINER = """\
import torch
from torch.utils.data import DataLoader

class Trainer:
    def __init__(self, model, data, device):
        self.model = model.to(device)
        self.data = data

    def step(self, x):
        loss = self.model(x).sum()
        loss.backward()

    def epoch(self):
        for x in self.data:
            self.step(x)

    def fit(self, epochs):
        for epoch in range(epochs):
            self.epoch()

def make_loader(dataset):
    return DataLoader(dataset, shuffle=True)

def build():
    net = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    return net, optimizer

def main(dataset, device):
    model, optimizer = build()
    loader = make_loader(dataset)
    Trainer(model, loader, device).fit(2)
"""


def test_a_returned_loader_reaches_the_attribute_it_is_stored_in():
    facts = facts_of(TRAINER)
    (loader,) = facts.loaders
    assert loader.returned
    held = {name for _, name in facts.loader_holders_of(loader)}
    assert {"loader", "data", "self.data"} <= held


def test_a_loop_that_calls_a_training_method_trains():
    facts = facts_of(TRAINER)
    loops = facts.loops_over["self.data"]
    assert loops and all(loop in facts.loops_calling_training for loop in loops)


def test_the_epoch_loop_is_found_through_the_method_that_iterates():
    facts = facts_of(TRAINER)
    (loader,) = facts.loaders
    loops = facts.epoch_loops(loader.name, loader.function)
    assert [facts.line_of(loop) for loop, _ in loops] == [18]


def test_a_model_flows_from_its_builder_into_the_trainer():
    facts = facts_of(TRAINER)
    (model,) = facts.models
    held = {name for _, name in facts.model_holders(model)}
    assert {"net", "model", "self.model"} <= held


MODULE_LEVEL = """\
import torch
from torch.utils.data import DataLoader

train_loader = DataLoader(range(8), shuffle=True)
model = torch.nn.Linear(1, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

def train(epoch):
    for x in train_loader:
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()

def shadowed():
    train_loader = [1, 2]
    for x in train_loader:
        pass

for epoch in range(3):
    train(epoch)
"""


def test_a_module_level_loader_read_in_a_function_is_the_same_value():
    facts = facts_of(MODULE_LEVEL)
    (loader,) = facts.loaders
    train_loop, shadowed_loop = facts.loops_over["train_loader"]
    assert facts.sees_value(train_loop, "train_loader", None)
    assert not facts.sees_value(shadowed_loop, "train_loader", None)
    assert [facts.line_of(loop) for loop, _ in facts.epoch_loops(loader.name, None)] == [19]


def test_a_one_step_function_makes_the_loop_around_its_call_a_training_loop():
    facts = facts_of("""\
import torch

def step(model, optimizer, batch):
    optimizer.zero_grad()
    model(batch).sum().backward()
    optimizer.step()

model = torch.nn.Linear(1, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(3):
    step(model, optimizer, torch.ones(1))
""")
    assert [facts.line_of(loop) for loop in facts.training_loops] == [10]


def test_models_are_found_through_the_names_their_parameters_were_gathered_in():
    facts = facts_of("""\
import torch
encoder = torch.nn.Linear(4, 8)
decoder = torch.nn.Linear(8, 1)
params = list(decoder.parameters()) + list(encoder.parameters())
optimizer = torch.optim.Adam(params, lr=1e-3)
""")
    assert sorted(model.name for model in facts.models) == ["decoder", "encoder"]


def test_a_model_is_found_through_named_parameter_groups():
    facts = facts_of("""\
import torch
model = torch.nn.Linear(4, 1)
named = list(model.named_parameters())
groups = [{"params": [p for n, p in named if "bias" not in n], "weight_decay": 0.01}]
optimizer = torch.optim.AdamW(groups, lr=1e-3)
""")
    assert [model.name for model in facts.models] == ["model"]


PHASES = """\
import torch
from torch.utils.data import DataLoader

def fit(model, optimizer, loaders):
    for epoch in range(3):
        for phase in ["fit", "check"]:
            is_fit = phase == "fit"
            for x in loaders[phase]:
                loss = model(x).sum()
                if is_fit:
                    loss.backward()
                    optimizer.step()

def main(train_set, val_set, model, optimizer):
    loaders = {"fit": DataLoader(train_set, shuffle=True), "check": DataLoader(val_set)}
    fit(model, optimizer, loaders)
"""


def test_a_dict_of_loaders_is_followed_into_the_function_it_is_passed_to():
    facts = facts_of(PHASES)
    (loaders,) = facts.loader_dicts()
    assert list(loaders.entries) == ["fit", "check"]
    (each,) = facts.dict_passes(loaders)
    assert (each.holder, each.keys, each.key_variable) == ("loaders", ("fit", "check"), "phase")


def test_the_keys_that_train_are_read_from_the_branch_that_steps_not_from_their_names():
    facts = facts_of(PHASES)
    (each,) = facts.dict_passes(facts.loader_dicts()[0])
    assert facts.keys_trained(each) == {"fit"}
    inverted = facts_of(PHASES.replace("if is_fit:", "if not is_fit:"))
    (each,) = inverted.dict_passes(inverted.loader_dicts()[0])
    assert inverted.keys_trained(each) == {"check"}


def test_a_test_on_the_key_that_cannot_be_read_says_so():
    facts = facts_of(PHASES.replace("if is_fit:", "if phase.startswith('f'):"))
    (each,) = facts.dict_passes(facts.loader_dicts()[0])
    assert isinstance(facts.keys_trained(each), str)
