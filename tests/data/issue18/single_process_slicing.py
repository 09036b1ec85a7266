"""Shaped like a character-level LM trainer: batches are sliced out of one tensor at
positions drawn from a generator of the script's own, so ddpify cannot shard them (DDP208)
and migrates nothing; `ddpify` exits 1 on it."""
import torch
from torch import nn

torch.manual_seed(0)
draws = torch.Generator().manual_seed(0)
data = torch.randint(0, 16, (512,))
block, batch = 8, 4
model = nn.Sequential(nn.Embedding(16, 8), nn.Flatten(), nn.Linear(8 * block, 16))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

for step in range(20):
    starts = torch.randint(0, len(data) - block - 1, (batch,), generator=draws)
    x = torch.stack([data[i:i + block] for i in starts])
    y = torch.stack([data[i + block] for i in starts])
    loss = nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print(f"loss {loss.item():.3f}")
