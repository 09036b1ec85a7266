import csv
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

# Distributed setup: one process per device under torchrun; plain `python` runs as before.
distributed = "WORLD_SIZE" in os.environ
local_rank = int(os.environ.get("LOCAL_RANK", 0))
if torch.cuda.is_available():
    torch.cuda.set_device(local_rank)
device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
if distributed:
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
is_main = not distributed or dist.get_rank() == 0
model = nn.Linear(4, 1).to(device)
if distributed:
    model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
dataset = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
sampler = DistributedSampler(dataset, shuffle=True) if distributed else None
loader = DataLoader(dataset, batch_size=8, shuffle=sampler is None, sampler=sampler)
if is_main:
    with open("log.csv", "w", newline="") as f:
        writer = csv.writer(f)
        for epoch in range(2):
            if sampler is not None:
                sampler.set_epoch(epoch)
            for x, y in loader:
                x, y = x.to(device), y.to(device)
                loss = nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
            writer.writerow([epoch, loss.item()])

if distributed:
    dist.destroy_process_group()
