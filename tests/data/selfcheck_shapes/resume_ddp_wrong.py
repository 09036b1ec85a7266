import os
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(10, 2)

    def forward(self, x):
        return self.fc(x)


# Distributed setup: one process per device under torchrun; plain `python` runs as before.
distributed = "WORLD_SIZE" in os.environ
local_rank = int(os.environ.get("LOCAL_RANK", 0))
if torch.cuda.is_available():
    torch.cuda.set_device(local_rank)
device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
if distributed:
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
is_main = not distributed or dist.get_rank() == 0
checkpoint = "ckpt.pth" if os.path.exists("ckpt.pth") else None
if checkpoint is None:
    model = Net()
    if distributed:
        model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
    start_epoch = 0
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
else:
    ckpt = torch.load(checkpoint, weights_only=False, map_location=device)
    model = ckpt["model"]
    start_epoch = ckpt["epoch"] + 1
    optimizer = ckpt["optimizer"]
model = model.to(device)
criterion = nn.CrossEntropyLoss()
torch.manual_seed(0)
ds = TensorDataset(torch.randn(64, 10), torch.randint(0, 2, (64,)))
sampler = DistributedSampler(ds, shuffle=True) if distributed else None
loader = DataLoader(ds, batch_size=8, shuffle=sampler is None, sampler=sampler)
for epoch in range(start_epoch, 3):
    if sampler is not None:
        sampler.set_epoch(epoch)
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
    if is_main:
        print(f"epoch {epoch} loss {loss.item():.4f}")
        torch.save({"epoch": epoch, "model": model, "optimizer": optimizer}, "ckpt.pth")

if distributed:
    dist.destroy_process_group()
