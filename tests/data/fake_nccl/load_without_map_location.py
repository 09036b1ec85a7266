"""BROKEN (load_without_map_location): every rank reloads the checkpoint rank 0 saved without
map_location: on a GPU machine each restores it onto the GPU it was saved from (cuda:0)."""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

# Distributed setup: one process per device under torchrun; plain `python` runs as before.
distributed = "WORLD_SIZE" in os.environ
local_rank = int(os.environ.get("LOCAL_RANK", 0))
if torch.cuda.is_available():
    torch.cuda.set_device(local_rank)
device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
if distributed:
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
is_main = not distributed or dist.get_rank() == 0

model = nn.Linear(4, 2).to(device)
if is_main:
    torch.save(model.state_dict(), "start.pt")
if distributed:
    dist.barrier()  # rank 0 has finished writing what is read next
model.load_state_dict(torch.load("start.pt"))
if distributed:
    model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
    dist.destroy_process_group()
