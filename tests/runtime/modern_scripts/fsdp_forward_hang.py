"""Evaluation on rank 0 only: the forward of an FSDP2 module all-gathers its parameters, so rank 0
hangs in the forward, rank 1 waits in the barrier."""
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

dist.init_process_group("gloo")
rank = dist.get_rank()
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))
fully_shard(model)
if rank == 0:
    with torch.no_grad():
        print(model(torch.randn(2, 8)).sum())  # [forward]
dist.barrier()  # [barrier]
