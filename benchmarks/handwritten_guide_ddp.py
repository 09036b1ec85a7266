"""The guide's image classifier migrated to DDP by hand, as the guide teaches (sections 2.1-2.5).

The yardstick for benchmarks/bench_emitted.py: ddpify's output for
fixtures/guide/guide_image_classifier must train as fast as this. Launch with
`torchrun --nproc_per_node=N handwritten_guide_ddp.py` (NCCL on GPUs, Gloo on CPU).
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class MyModel(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.net = nn.Sequential(
            nn.Flatten(), nn.Linear(3 * 8 * 8, 64), nn.ReLU(), nn.Linear(64, num_classes)
        )

    def forward(self, x):
        return self.net(x)


# 2.1 process group: torchrun sets RANK, LOCAL_RANK and WORLD_SIZE.
local_rank = int(os.environ["LOCAL_RANK"])
if torch.cuda.is_available():
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    dist.init_process_group("nccl")
else:
    device = torch.device("cpu")
    dist.init_process_group("gloo")
rank = dist.get_rank()

torch.manual_seed(0)

# 1. Data, 2.3: each rank reads its own shard.
images = torch.randn(512, 3, 8, 8)
labels = torch.randint(0, 10, (512,))
train_dataset = TensorDataset(images, labels)
train_sampler = DistributedSampler(train_dataset, shuffle=True)
train_loader = DataLoader(train_dataset, batch_size=32, sampler=train_sampler)

# 2. Model, 2.2: wrapped once it is on its device.
model = MyModel().to(device)
model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
optimizer = torch.optim.Adam(model.parameters())
criterion = nn.CrossEntropyLoss()

# 3. Training loop
for epoch in range(3):
    train_sampler.set_epoch(epoch)  # 2.4: a new shuffle each epoch
    model.train()
    for inputs, targets in train_loader:
        inputs, targets = inputs.to(device), targets.to(device)
        optimizer.zero_grad()
        outputs = model(inputs)
        loss = criterion(outputs, targets)
        loss.backward()
        optimizer.step()
    if rank == 0:  # 2.5 and 4.3: one rank prints and saves the unwrapped model
        print(f"epoch {epoch}: last batch loss {loss.item():.4f}")
        torch.save(model.module.state_dict(), f"checkpoint_{epoch}.pth")

dist.destroy_process_group()
