"""BROKEN (import_name_error): a module-level line uses is_main, which only main() defines."""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

if is_main:
    print("training script loaded")


def main():
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
    dataset = TensorDataset(torch.randn(256, 16), torch.randint(0, 4, (256,)))
    sampler = DistributedSampler(dataset, shuffle=True) if distributed else None
    loader = DataLoader(
        dataset, batch_size=32, shuffle=sampler is None, sampler=sampler
    )
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to(device)
    if distributed:
        model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    criterion = nn.CrossEntropyLoss()
    for epoch in range(3):
        if sampler is not None:
            sampler.set_epoch(epoch)
        for inputs, targets in loader:
            inputs, targets = inputs.to(device), targets.to(device)
            optimizer.zero_grad()
            loss = criterion(model(inputs), targets)
            loss.backward()
            optimizer.step()
        if is_main:
            print(f"epoch {epoch}: loss {loss.item():.4f}")
    if is_main:
        torch.save(getattr(model, "module", model).state_dict(), "model.pth")


if __name__ == "__main__":
    try:
        main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
