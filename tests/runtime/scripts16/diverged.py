"""Rank 0 changes its replica outside DDP's forward/backward: the replicas silently diverge."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(4, 4)
        self.head = torch.nn.Linear(4, 1)

    def forward(self, x):
        return self.head(self.body(x))


dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(Net())  # [ddp]
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    opt.zero_grad()
    model(torch.randn(8, 4)).sum().backward()
    opt.step()
if dist.get_rank() == 0:
    with torch.no_grad():
        model.module.head.weight.add_(0.5)
dist.destroy_process_group()
