"""Rank 0 logs a metric with all_reduce between forward and backward; rank 1 does not: rank 1's
DDP gradient all-reduce meets rank 0's metric all_reduce."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
model = DDP(torch.nn.Linear(4, 1))
for step in range(2):
    loss = model(torch.randn(8, 4)).sum()
    if rank == 0:  # [guard]
        dist.all_reduce(loss.detach().clone())  # [metric]
    loss.backward()  # [backward]
