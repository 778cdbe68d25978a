"""Rank 0 scores the model through the DDP wrapper (its forward broadcasts the BatchNorm buffers);
rank 1 goes to the barrier."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from helpers import score

dist.init_process_group("gloo")
rank = dist.get_rank()
model = DDP(torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.BatchNorm1d(3)))
model(torch.randn(4, 3)).sum().backward()
if rank == 0:  # [guard]
    print(score(model, [torch.randn(4, 3)]))
dist.barrier()  # [barrier]
