"""A minimal training script that unit tests append their case to."""
from ddpify.api import migrate_source

HEAD = """import torch
from torch.utils.data import DataLoader
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
loader = DataLoader(list(range(8)), batch_size=2, shuffle=True)
model = torch.nn.Linear(1, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
"""


def codes(source):
    return [d.code for d in migrate_source(source).diagnostics]
