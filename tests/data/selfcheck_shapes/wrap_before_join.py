"""A trainer that builds its network first and its data loader after, all in __init__,
and trains on the CPU."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Trainer:
    def __init__(self, batch_size=8):
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 1))
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=1e-3)
        data = TensorDataset(torch.randn(64, 6), torch.randn(64, 1))
        self.loader = DataLoader(data, batch_size=batch_size, shuffle=True)

    def fit(self, epochs):
        for epoch in range(epochs):
            for inputs, targets in self.loader:
                loss = nn.functional.mse_loss(self.net(inputs), targets)
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
            print(f"epoch {epoch}: loss {loss.item():.4f}")
        torch.save(self.net.state_dict(), "net.pt")


if __name__ == "__main__":
    Trainer().fit(3)
