import os
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(10, 2)

    def forward(self, x):
        return self.fc(x)


device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
checkpoint = "ckpt.pth" if os.path.exists("ckpt.pth") else None
if checkpoint is None:
    model = Net()
    start_epoch = 0
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
else:
    ckpt = torch.load(checkpoint, weights_only=False)
    model = ckpt["model"]
    start_epoch = ckpt["epoch"] + 1
    optimizer = ckpt["optimizer"]
model = model.to(device)
criterion = nn.CrossEntropyLoss()
torch.manual_seed(0)
ds = TensorDataset(torch.randn(64, 10), torch.randint(0, 2, (64,)))
loader = DataLoader(ds, batch_size=8, shuffle=True)
for epoch in range(start_epoch, 3):
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch} loss {loss.item():.4f}")
    torch.save({"epoch": epoch, "model": model, "optimizer": optimizer}, "ckpt.pth")
