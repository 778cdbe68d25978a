"""A module with a parameter that forward never uses: DDP's reducer raises on the second iteration."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.used = torch.nn.Linear(4, 1)
        self.head_unused = torch.nn.Linear(4, 1)

    def forward(self, x):
        return self.used(x)


dist.init_process_group("gloo")
model = DDP(Net())
for step in range(3):
    out = model(torch.randn(8, 4))  # [forward]
    out.sum().backward()
