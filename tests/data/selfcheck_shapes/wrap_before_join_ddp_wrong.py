"""A trainer that builds its network first and its data loader after, all in __init__,
and trains on the CPU."""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class Trainer:
    def __init__(self, batch_size=8):
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 1))
        if dist.is_initialized():
            self.net = DDP(self.net)
        # Distributed setup: join torchrun's process group before the loaders below are sharded.
        if "WORLD_SIZE" in os.environ and not dist.is_initialized():
            if torch.accelerator.is_available():
                torch.accelerator.set_device_index(int(os.environ["LOCAL_RANK"]))
            dist.init_process_group()
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=1e-3)
        data = TensorDataset(torch.randn(64, 6), torch.randn(64, 1))
        self.sampler = (
            DistributedSampler(data, shuffle=True) if dist.is_initialized() else None
        )
        self.loader = DataLoader(
            data,
            batch_size=batch_size,
            shuffle=self.sampler is None,
            sampler=self.sampler,
        )

    def fit(self, epochs):
        # Distributed setup: one process per device under torchrun; plain `python` runs as before.
        distributed = "WORLD_SIZE" in os.environ
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        if distributed:
            if not dist.is_initialized():  # not joined before the loaders
                dist.init_process_group("gloo")
        is_main = not distributed or dist.get_rank() == 0
        for epoch in range(epochs):
            if self.sampler is not None:
                self.sampler.set_epoch(epoch)
            for inputs, targets in self.loader:
                loss = nn.functional.mse_loss(self.net(inputs), targets)
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
            if is_main:
                print(f"epoch {epoch}: loss {loss.item():.4f}")
        if is_main:
            torch.save(getattr(self.net, "module", self.net).state_dict(), "net.pt")


if __name__ == "__main__":
    Trainer().fit(3)
    if dist.is_initialized():
        dist.destroy_process_group()
