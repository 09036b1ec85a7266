import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

cuda = True if torch.cuda.is_available() else False


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))

    def forward(self, z):
        return self.net(z)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1), nn.Sigmoid())

    def forward(self, x):
        return self.net(x)


torch.manual_seed(0)
adversarial_loss = nn.BCELoss()
generator, discriminator = Generator(), Discriminator()
if cuda:
    generator.cuda()
    discriminator.cuda()
    adversarial_loss.cuda()

data = TensorDataset(torch.randn(64, 4))
dataloader = DataLoader(data, batch_size=16, shuffle=True)
optimizer_G = torch.optim.Adam(generator.parameters(), lr=2e-4)
optimizer_D = torch.optim.Adam(discriminator.parameters(), lr=2e-4)
Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor

for epoch in range(2):
    for i, (real,) in enumerate(dataloader):
        valid = Tensor(real.size(0), 1).fill_(1.0)
        fake = Tensor(real.size(0), 1).fill_(0.0)
        real = real.type(Tensor)
        optimizer_G.zero_grad()
        z = Tensor(real.size(0), 8).normal_()
        gen = generator(z)
        g_loss = adversarial_loss(discriminator(gen), valid)
        g_loss.backward()
        optimizer_G.step()
        optimizer_D.zero_grad()
        d_loss = (adversarial_loss(discriminator(real), valid) + adversarial_loss(discriminator(gen.detach()), fake)) / 2
        d_loss.backward()
        optimizer_D.step()
    print(f"[Epoch {epoch}] [D loss: {d_loss.item():.4f}] [G loss: {g_loss.item():.4f}]")
torch.save(generator.state_dict(), "generator.pth")
