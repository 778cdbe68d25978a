"""Rank 0 gathers a DTensor (full_tensor: an all-gather through the functional collectives) that
rank 1 never gathers: rank 0 hangs in wait_tensor, rank 1 waits in the barrier."""
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

dist.init_process_group("gloo")
rank = dist.get_rank()
mesh = init_device_mesh("cpu", (2,))
w = distribute_tensor(torch.randn(8, 4), mesh, [Shard(0)])
if rank == 0:
    full = w.full_tensor()  # [gather]
dist.barrier()  # [barrier]
