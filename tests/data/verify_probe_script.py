"""A tiny script that touches every hook of the probe (tests/test_verify_probe.py).

Usage: verify_probe_script.py NUM_WORKERS
"""
import os
import sys
import tempfile

import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
data = TensorDataset(torch.randn(24, 3), torch.randn(24, 1))
train_loader = DataLoader(data, batch_size=4, shuffle=True, num_workers=int(sys.argv[1]))
eval_loader = DataLoader(data, batch_size=8)
model = torch.nn.Linear(3, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

for epoch in range(5):
    for inputs, targets in train_loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        for inputs, _ in eval_loader:
            model(inputs)
    print(f"epoch {epoch} loss {loss.item():.3f}")
    with open("log.txt", "a") as log:
        log.write(f"{epoch}\n")
    torch.save({"model": {"module.weight": model.weight}}, "ckpt.pth")
with open(os.path.join(tempfile.gettempdir(), "scratch.txt"), "w") as scratch:
    scratch.write("x")
print("done")
