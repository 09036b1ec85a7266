import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

net = nn.Sequential(nn.Linear(10, 8), nn.ReLU(), nn.Linear(8, 2))
criterion = nn.CrossEntropyLoss()
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
dataset = TensorDataset(torch.randn(64, 10), torch.randint(0, 2, (64,)))
sampler = DistributedSampler(dataset, shuffle=True) if distributed else None
loader = DataLoader(dataset, batch_size=8, shuffle=sampler is None, sampler=sampler)
use_gpu = torch.cuda.is_available()
if use_gpu:
    criterion.to(device)
if distributed:
    net = DDP(net, device_ids=[local_rank] if device.type == "cuda" else None)
optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
for epoch in range(2):
    if sampler is not None:
        sampler.set_epoch(epoch)
    for x, y in loader:
        if use_gpu:
            x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = criterion(net(x), y)
        loss.backward()
        optimizer.step()
    if is_main:
        print(f"epoch {epoch} loss {loss.item():.4f}")

if distributed:
    dist.destroy_process_group()
