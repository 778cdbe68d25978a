import os

import torch
import torch.distributed as dist


def _setup_from_env(backend, **kwargs):
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    if hasattr(torch, "npu") and torch.npu.is_available():
        per_node = torch.npu.device_count()
        torch.npu.set_device(rank % per_node)
        dist.init_process_group(backend="hccl", rank=rank, world_size=world, **kwargs)
    else:
        torch.cuda.set_device(rank % torch.cuda.device_count())
        dist.init_process_group(backend=backend, **kwargs)


def setup(launcher, backend="nccl", **kwargs):
    if launcher != "pytorch":
        raise ValueError(f"unsupported launcher {launcher}")
    _setup_from_env(backend, **kwargs)
