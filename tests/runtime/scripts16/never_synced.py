"""The training loop calls the wrapped module directly: DDP never all-reduces the gradients."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(torch.nn.Linear(4, 1))  # [ddp]
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    opt.zero_grad()
    model.module(torch.randn(8, 4)).sum().backward()
    opt.step()
