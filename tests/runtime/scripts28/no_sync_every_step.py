"""Gradient accumulation gone wrong: no_sync() is held on every step, so DDP never all-reduces."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(torch.nn.Linear(4, 1))  # [ddp]
opt = torch.optim.SGD(model.parameters(), lr=0.1)
torch.manual_seed(dist.get_rank())
for step in range(3):
    opt.zero_grad()
    with model.no_sync():  # [nosync]
        model(torch.randn(8, 4)).sum().backward()
    opt.step()
dist.destroy_process_group()
