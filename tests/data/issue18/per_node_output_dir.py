"""A DDP script that makes its output folder once per machine (LOCAL_RANK 0), without
exist_ok: right on one machine; on two nodes sharing a filesystem the second node's
`os.makedirs` raises FileExistsError, and the first node's agent waits for it."""
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

distributed = "WORLD_SIZE" in os.environ
local_rank = int(os.environ.get("LOCAL_RANK", 0))
if distributed:
    dist.init_process_group("gloo")
is_main = not distributed or dist.get_rank() == 0
if local_rank == 0:
    os.makedirs("runs/exp1")
if distributed:
    dist.barrier()  # the folder exists before anyone writes into it

torch.manual_seed(0)
dataset = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
sampler = DistributedSampler(dataset) if distributed else None
loader = DataLoader(dataset, batch_size=8, shuffle=sampler is None, sampler=sampler)
model = nn.Linear(4, 1)
if distributed:
    model = DDP(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    if sampler is not None:
        sampler.set_epoch(epoch)
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
if is_main:
    torch.save(getattr(model, "module", model).state_dict(), "runs/exp1/model.pt")
if distributed:
    dist.destroy_process_group()
