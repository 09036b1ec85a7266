import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

cuda = True if torch.cuda.is_available() else False


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))

    def forward(self, z):
        return self.net(z)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1), nn.Sigmoid())

    def forward(self, x):
        return self.net(x)


torch.manual_seed(0)
adversarial_loss = nn.BCELoss()
generator, discriminator = Generator(), Discriminator()
# Distributed setup: one process per device under torchrun; plain `python` runs as before.
distributed = "WORLD_SIZE" in os.environ
local_rank = int(os.environ.get("LOCAL_RANK", 0))
if torch.cuda.is_available():
    torch.cuda.set_device(local_rank)
device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
if distributed:
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
is_main = not distributed or dist.get_rank() == 0
if cuda:
    adversarial_loss.to(device)
if distributed:
    generator = DDP(
        generator, device_ids=[local_rank] if device.type == "cuda" else None
    )
if distributed:
    discriminator = DDP(
        discriminator, device_ids=[local_rank] if device.type == "cuda" else None
    )

data = TensorDataset(torch.randn(64, 4))
sampler = DistributedSampler(data, shuffle=True) if distributed else None
dataloader = DataLoader(data, batch_size=16, shuffle=sampler is None, sampler=sampler)
optimizer_G = torch.optim.Adam(generator.parameters(), lr=2e-4)
optimizer_D = torch.optim.Adam(discriminator.parameters(), lr=2e-4)
Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor

for epoch in range(2):
    if sampler is not None:
        sampler.set_epoch(epoch)
    for i, (real,) in enumerate(dataloader):
        valid = Tensor(real.size(0), 1).fill_(1.0)
        fake = Tensor(real.size(0), 1).fill_(0.0)
        real = real.type(Tensor)
        optimizer_G.zero_grad()
        z = Tensor(real.size(0), 8).normal_()
        gen = generator(z)
        g_loss = adversarial_loss(discriminator(gen), valid)
        g_loss.backward()
        optimizer_G.step()
        optimizer_D.zero_grad()
        d_loss = (adversarial_loss(discriminator(real), valid) + adversarial_loss(discriminator(gen.detach()), fake)) / 2
        d_loss.backward()
        optimizer_D.step()
    if is_main:
        print(f"[Epoch {epoch}] [D loss: {d_loss.item():.4f}] [G loss: {g_loss.item():.4f}]")
if is_main:
    torch.save(getattr(generator, "module", generator).state_dict(), "generator.pth")

if distributed:
    dist.destroy_process_group()
