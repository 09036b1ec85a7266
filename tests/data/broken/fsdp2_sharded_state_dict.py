"""FSDP2 broken: rank 0 saves model.state_dict(), its own DTensor shards, not the full state.

A small transformer language model: a stack of identical blocks, saved at the end."""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import fully_shard
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

VOCAB, WIDTH, CONTEXT = 32, 16, 8


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attention = nn.MultiheadAttention(width, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(width)
        self.feed_forward = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attention(h, h, h, need_weights=False)[0]
        return x + self.feed_forward(self.norm2(x))


class TinyTransformer(nn.Module):
    def __init__(self, depth=2, heads=2):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, WIDTH)
        self.layers = nn.ModuleList([Block(WIDTH, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens):
        x = self.embedding(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


def main():
    torch.manual_seed(0)
    # Distributed setup: one process per device under torchrun; plain `python` runs as before.
    distributed = "WORLD_SIZE" in os.environ
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
    if distributed:
        dist.init_process_group(
            "nccl" if torch.cuda.is_available() else "gloo",
            device_id=device if torch.cuda.is_available() else None,
        )
    is_main = not distributed or dist.get_rank() == 0
    tokens = torch.randint(0, VOCAB, (64, CONTEXT + 1))
    dataset = TensorDataset(tokens[:, :-1], tokens[:, 1:])
    sampler = DistributedSampler(dataset, shuffle=True) if distributed else None
    loader = DataLoader(dataset, batch_size=8, shuffle=sampler is None, sampler=sampler)

    model = TinyTransformer().to(device)
    # FSDP2: each block's parameters, gradients and optimizer state are split across the ranks.
    if distributed:
        for block in model.layers:
            fully_shard(block)
        fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)

    for epoch in range(3):
        if sampler is not None:
            sampler.set_epoch(epoch)
        model.train()
        for inputs, targets in loader:
            inputs, targets = inputs.to(device), targets.to(device)
            logits = model(inputs)
            loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if is_main:
            print(f"epoch {epoch}: loss {loss.item():.4f}")

    if is_main:
        torch.save(model.state_dict(), "transformer.pt")


if __name__ == "__main__":
    try:
        main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
