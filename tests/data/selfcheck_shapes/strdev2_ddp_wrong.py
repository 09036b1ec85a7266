import os

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
    device = torch.device(device)
    if device.type != "cpu":  # this process's own accelerator
        device = torch.device(device.type, local_rank)
        torch.accelerator.set_device_index(local_rank)
    dist.init_process_group(dist.get_default_backend_for_device(device))
is_main = not distributed or dist.get_rank() == 0
if device.startswith("cuda"):
    torch.backends.cudnn.benchmark = True
model = nn.Linear(10, 2).to(device)
if distributed:
    model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
criterion = nn.CrossEntropyLoss()
torch.manual_seed(0)
dataset = TensorDataset(torch.randn(64, 10), torch.randint(0, 2, (64,)))
sampler = DistributedSampler(dataset, shuffle=True) if distributed else None
loader = DataLoader(dataset, batch_size=8, shuffle=sampler is None, sampler=sampler)
for epoch in range(2):
    if sampler is not None:
        sampler.set_epoch(epoch)
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            loss = criterion(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    if is_main:
        print(f"epoch {epoch} on {device}: loss {loss.item():.4f}")

if distributed:
    dist.destroy_process_group()
