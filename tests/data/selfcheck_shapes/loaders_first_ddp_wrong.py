"""The loaders are made in the __main__ block, before the Trainer that picks the device."""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def is_main_process():
    """True in the process that prints and writes files: rank 0, or the only process."""
    if not dist.is_initialized():  # before the group exists, torchrun's RANK tells
        return int(os.environ.get("RANK", 0)) == 0
    return dist.get_rank() == 0


def make_dataset(n, seed):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    return TensorDataset(x, x.sum(1, keepdim=True))


class Trainer:
    def __init__(self, model, train_loader, lr=0.05):
        # Distributed setup: one process per device under torchrun; plain `python` runs as before.
        distributed = "WORLD_SIZE" in os.environ
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        if torch.cuda.is_available():
            torch.cuda.set_device(local_rank)
        self.device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
        if distributed:
            dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        self.model = model.to(self.device)
        if distributed:
            self.model = DDP(
                self.model,
                device_ids=[local_rank] if self.device.type == "cuda" else None,
            )
        self.train_loader = train_loader
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=lr)

    def fit(self, epochs):
        for epoch in range(epochs):
            if isinstance(train_loader.sampler, DistributedSampler):
                train_loader.sampler.set_epoch(epoch)
            if isinstance(self.train_loader.sampler, DistributedSampler):
                self.train_loader.sampler.set_epoch(epoch)
            for x, y in self.train_loader:
                x, y = x.to(self.device), y.to(self.device)
                self.optimizer.zero_grad()
                loss = nn.functional.mse_loss(self.model(x), y)
                loss.backward()
                self.optimizer.step()
            if is_main_process():
                print(f"epoch {epoch}: {loss.item():.4f}")


if __name__ == "__main__":
    torch.manual_seed(0)
    train_dataset = make_dataset(128, 0)
    train_sampler = (
        DistributedSampler(train_dataset, shuffle=True)
        if dist.is_initialized()
        else None
    )
    train_loader = DataLoader(
        train_dataset,
        batch_size=16,
        shuffle=train_sampler is None,
        sampler=train_sampler,
    )
    finetune_dataset = make_dataset(64, 1)
    finetune_sampler = (
        DistributedSampler(finetune_dataset, shuffle=True)
        if dist.is_initialized()
        else None
    )
    finetune_loader = DataLoader(
        finetune_dataset,
        batch_size=16,
        shuffle=finetune_sampler is None,
        sampler=finetune_sampler,
    )
    model = nn.Linear(4, 1)
    Trainer(model, train_loader).fit(2)
    Trainer(model, finetune_loader, lr=0.01).fit(1)
    if dist.is_initialized():
        dist.destroy_process_group()
