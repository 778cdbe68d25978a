"""A correct DDP loop with gradient accumulation under no_sync(): no finding."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(4):
    opt.zero_grad()
    with model.no_sync():
        model(torch.randn(8, 4)).sum().backward()
    model(torch.randn(8, 4)).sum().backward()
    opt.step()
dist.destroy_process_group()
