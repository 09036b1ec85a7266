import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

net = nn.Sequential(nn.Linear(10, 8), nn.ReLU(), nn.Linear(8, 2))
criterion = nn.CrossEntropyLoss()
torch.manual_seed(0)
loader = DataLoader(TensorDataset(torch.randn(64, 10), torch.randint(0, 2, (64,))), batch_size=8, shuffle=True)
use_gpu = torch.cuda.is_available()
if use_gpu:
    net.cuda()
    criterion.cuda()
optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
for epoch in range(2):
    for x, y in loader:
        if use_gpu:
            x, y = x.cuda(), y.cuda()
        optimizer.zero_grad()
        loss = criterion(net(x), y)
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch} loss {loss.item():.4f}")
