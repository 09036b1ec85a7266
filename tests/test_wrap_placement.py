"""Where the DDP wrap goes (rules/model.py _wrap_anchor): after every statement that
builds, loads, moves or initialises the model before it first trains; nothing of the user's
deleted. Shapes too small for a fixture of their own."""
from ddpify.api import migrate_source

HEAD = """\
import torch
from torch.utils.data import DataLoader
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
loader = DataLoader(list(range(8)), batch_size=2, shuffle=True)
"""
LOOP = """\
for epoch in range(2):
    for x in loader:
        loss = model(x.float().view(-1, 1)).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""
WRAP = "    model = DDP(model"


def lines_of(code):
    return code.splitlines()


def index_of(code, text):
    return next(i for i, line in enumerate(lines_of(code)) if text in line)


def test_an_init_after_the_optimizer_comes_before_the_wrap():
    code = migrate_source(HEAD + "model = torch.nn.Linear(1, 1)\n"
                          "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
                          "model.to(device)\nmodel.apply(lambda m: None)\n" + LOOP).code
    assert "model.to(device)" in code
    assert index_of(code, "model.apply(") < index_of(code, WRAP) < index_of(code, "for epoch")


def test_a_move_under_a_flag_is_kept_and_the_wrap_follows_the_if():
    code = migrate_source(HEAD + "model = torch.nn.Linear(1, 1)\nif torch.cuda.is_available():\n"
                          "    model.cuda()\n"
                          "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n" + LOOP).code
    assert "    model.to(device)" in code
    assert index_of(code, "    model.to(device)") < index_of(code, WRAP)


def test_a_model_trained_out_of_sight_is_wrapped_where_it_is_built_not_after_the_training():
    code = migrate_source(HEAD + "from engine import Trainer\n"
                          "model = torch.nn.Linear(1, 1).to(device)\n"
                          "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
                          "Trainer(model, optimizer, loader).fit()\n"
                          "model.load_state_dict(torch.load('best.pt'))\n").code
    assert index_of(code, WRAP) < index_of(code, "Trainer(model")
    assert 'getattr(model, "module", model).load_state_dict' in code
