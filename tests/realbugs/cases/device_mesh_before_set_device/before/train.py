import os

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh


def run(mesh):
    x = torch.ones(4, device="cuda")
    dist.all_reduce(x, group=mesh.get_group("dp"))


if __name__ == "__main__":
    mesh = init_device_mesh("cuda", (2, 2), mesh_dim_names=("dp", "tp"))
    run(mesh)
    dist.destroy_process_group()
