import os

import torch
import torch.distributed as tdist


def npu_present():
    return hasattr(torch, "npu") and torch.npu.is_available()


def start_from_env(backend="nccl", **kwargs):
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    node_rank = int(os.environ["LOCAL_RANK"])
    if npu_present():
        import torch_npu  # noqa: F401
        torch.npu.set_device(node_rank)
        tdist.init_process_group(backend="hccl", rank=rank, world_size=world, **kwargs)
    else:
        torch.cuda.set_device(node_rank)
        tdist.init_process_group(backend=backend, rank=rank, world_size=world, **kwargs)
