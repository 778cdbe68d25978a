"""Rank 1 redistributes a sharded DTensor to replicated (an all-gather) in a helper; rank 0 does
not: rank 1 hangs in redistribute, called from the helper's line."""
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor


def replicate(t, mesh):
    return t.redistribute(mesh, [Replicate()])  # [redistribute]


dist.init_process_group("gloo")
rank = dist.get_rank()
mesh = init_device_mesh("cpu", (2,))
w = distribute_tensor(torch.randn(8, 4), mesh, [Shard(0)])
if rank == 1:
    w = replicate(w, mesh)
dist.barrier()  # [barrier]
