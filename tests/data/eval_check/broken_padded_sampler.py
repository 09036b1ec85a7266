"""BROKEN (padded sampler): evaluation sharded with DistributedSampler, which pads.

51 samples over 2 ranks: the sampler repeats index 0 to give both ranks 26, so the gathered
figures count one sample twice. The fetch check must catch the duplicate.
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

BATCH_SIZE = 8

torch.manual_seed(0)
distributed = "WORLD_SIZE" in os.environ
if distributed:
    dist.init_process_group("gloo")
rank = dist.get_rank() if distributed else 0
world_size = dist.get_world_size() if distributed else 1

inputs = torch.randn(51, 4)
targets = torch.randint(0, 3, (51,))
train_set = TensorDataset(inputs, targets)
val_set = TensorDataset(inputs, targets)
train_sampler = DistributedSampler(train_set) if distributed else None
train_loader = DataLoader(train_set, batch_size=BATCH_SIZE, shuffle=train_sampler is None, sampler=train_sampler)
val_sampler = DistributedSampler(val_set, shuffle=False) if distributed else None
val_loader = DataLoader(val_set, batch_size=BATCH_SIZE, sampler=val_sampler)

model = nn.Linear(4, 3)
if distributed:
    model = nn.parallel.DistributedDataParallel(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
criterion = nn.CrossEntropyLoss()


def evaluate():
    model.eval()
    loss_sum, correct = 0.0, 0
    with torch.no_grad():
        for x, y in val_loader:
            output = model(x)
            loss_sum += criterion(output, y).item() * len(y)
            correct += (output.argmax(dim=1) == y).sum().item()
    if distributed:
        # A float64 CPU tensor (Gloo): all_gather_object would need numpy.
        totals = torch.tensor([loss_sum, correct], dtype=torch.float64)
        dist.all_reduce(totals)
        loss_sum, correct = totals[0].item(), int(totals[1])
    if rank == 0:
        print(f"Test set: loss {loss_sum / len(val_set):.4f}, accuracy {correct}/{len(val_set)}")


for epoch in range(2):
    if train_sampler is not None:
        train_sampler.set_epoch(epoch)
    model.train()
    for x, y in train_loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
    if rank == 0:
        print(f"epoch {epoch}: last batch loss {loss.item():.4f}")
    evaluate()

if distributed:
    dist.destroy_process_group()
