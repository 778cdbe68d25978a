import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset


class TwoTower(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.text = torch.nn.Linear(8, 8)
        self.graph = torch.nn.Linear(8, 8)  # only used when a graph is given

    def forward(self, x, graph=None):
        y = self.text(x)
        if graph is not None:
            y = y + self.graph(graph)
        return y.square().mean()


def train(epochs=3, lr=1e-4):
    loader = DataLoader(TensorDataset(torch.randn(64, 8)), batch_size=8, shuffle=True, drop_last=True)
    accelerator = Accelerator()
    model = TwoTower().to(accelerator.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for _ in range(epochs):
        model.train()
        for (x,) in loader:
            loss = model(x)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()


if __name__ == "__main__":
    train()
