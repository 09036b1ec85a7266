"""Shaped like pytorch-cifar's main.py: a line printed only when the test accuracy beats
the best so far. How often it prints depends on the training: under `ddpify verify` the
original prints it once and the 2-rank run (global batch 8, not 4) twice, both on rank 0."""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(1)
inputs = torch.randn(96, 6)
labels = (inputs[:, 0] + 0.3 * inputs[:, 1] > 0).long()
train_loader = DataLoader(TensorDataset(inputs[:64], labels[:64]), batch_size=4, shuffle=True)
test_inputs, test_labels = inputs[64:], labels[64:]
model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
best_acc = 0.85  # the accuracy of the model in use: save only a better one


def test(epoch):
    global best_acc
    with torch.no_grad():
        acc = (model(test_inputs).argmax(1) == test_labels).float().mean().item()
    print(f"epoch {epoch}: test acc {acc:.3f}")
    if acc > best_acc:
        print("Saving best..")
        torch.save(model.state_dict(), "best.pth")
        best_acc = acc


for epoch in range(6):
    for x, y in train_loader:
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    test(epoch)
