"""BROKEN (handoff_no_barrier): rank 0 saves model.pth and every rank loads it at once, with no barrier."""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class MyModel(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.net = nn.Sequential(
            nn.Flatten(), nn.Linear(3 * 8 * 8, 64), nn.ReLU(), nn.Linear(64, num_classes)
        )

    def forward(self, x):
        return self.net(x)


torch.manual_seed(0)
# Distributed setup: one process per device under torchrun; plain `python` runs as before.
distributed = "WORLD_SIZE" in os.environ
local_rank = int(os.environ.get("LOCAL_RANK", 0))
if torch.cuda.is_available():
    torch.cuda.set_device(local_rank)
device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
if distributed:
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
is_main = not distributed or dist.get_rank() == 0

# 1. Data
images = torch.randn(512, 3, 8, 8)
labels = torch.randint(0, 10, (512,))
train_dataset = TensorDataset(images, labels)
train_sampler = DistributedSampler(train_dataset, shuffle=True) if distributed else None
train_loader = DataLoader(
    train_dataset, batch_size=32, shuffle=train_sampler is None, sampler=train_sampler
)

# 2. Model
model = MyModel().to(device)
if distributed:
    model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
optimizer = torch.optim.Adam(model.parameters())
criterion = nn.CrossEntropyLoss()

# 3. Training loop
for epoch in range(3):
    if train_sampler is not None:
        train_sampler.set_epoch(epoch)
    model.train()
    for inputs, targets in train_loader:
        inputs, targets = inputs.to(device), targets.to(device)
        optimizer.zero_grad()
        outputs = model(inputs)
        loss = criterion(outputs, targets)
        loss.backward()
        optimizer.step()
    if is_main:
        print(f"epoch {epoch}: last batch loss {loss.item():.4f}")
        torch.save(getattr(model, "module", model).state_dict(), f"checkpoint_{epoch}.pth")

if is_main:
    torch.save(getattr(model, "module", model).state_dict(), "model.pth")
state = torch.load("model.pth", map_location=device)
getattr(model, "module", model).load_state_dict(state)

if distributed:
    dist.destroy_process_group()
