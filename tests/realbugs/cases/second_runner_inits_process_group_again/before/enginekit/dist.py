import os

import torch
import torch.distributed as dist


def init_dist(launcher, backend="nccl", **kwargs):
    if launcher != "pytorch":
        raise ValueError(launcher)
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(backend=backend, **kwargs)
