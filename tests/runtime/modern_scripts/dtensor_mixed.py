"""A DTensor plus a plain tensor: DTensor raises on every rank."""
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (2,))
w = distribute_tensor(torch.randn(8, 4), mesh, [Shard(0)])
bias = torch.zeros(8, 4)
y = w + bias  # [mixed]
dist.barrier()
