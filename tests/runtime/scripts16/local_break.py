"""A rank-local early stop: rank 0 decides to stop on its own loss and breaks out of the loop, then
finishes the script; rank 1 waits in DDP's all-reduce in backward()."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(rank)
model = DDP(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(20):
    opt.zero_grad()
    loss = model(torch.randn(8, 4)).pow(2).mean()
    if rank == 0 and step == 3:
        break  # [brk]
    loss.backward()  # [wait]
    opt.step()
dist.destroy_process_group()  # [end]
