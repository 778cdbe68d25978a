"""A mesh dimension used by a name the mesh does not have: every rank raises."""
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (1, 2), mesh_dim_names=("data", "model"))
tp = mesh["tp"]  # [dim]
dist.barrier()
