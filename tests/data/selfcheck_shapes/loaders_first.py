"""The loaders are made in the __main__ block, before the Trainer that picks the device."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def make_dataset(n, seed):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    return TensorDataset(x, x.sum(1, keepdim=True))


class Trainer:
    def __init__(self, model, train_loader, lr=0.05):
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.model = model.to(self.device)
        self.train_loader = train_loader
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=lr)

    def fit(self, epochs):
        for epoch in range(epochs):
            for x, y in self.train_loader:
                x, y = x.to(self.device), y.to(self.device)
                self.optimizer.zero_grad()
                loss = nn.functional.mse_loss(self.model(x), y)
                loss.backward()
                self.optimizer.step()
            print(f"epoch {epoch}: {loss.item():.4f}")


if __name__ == "__main__":
    torch.manual_seed(0)
    train_loader = DataLoader(make_dataset(128, 0), batch_size=16, shuffle=True)
    finetune_loader = DataLoader(make_dataset(64, 1), batch_size=16, shuffle=True)
    model = nn.Linear(4, 1)
    Trainer(model, train_loader).fit(2)
    Trainer(model, finetune_loader, lr=0.01).fit(1)
