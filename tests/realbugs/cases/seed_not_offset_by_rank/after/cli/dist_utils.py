import os

import torch
import torch.distributed as dist


def dist_setup(config):
    dist.init_process_group("nccl", rank=int(os.environ["RANK"]), world_size=config["world_size"])
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))


def get_rank():
    return dist.get_rank() if dist.is_initialized() else 0
