import os

import torch
import torch.distributed as tdist


def start_pytorch(backend="nccl", **kwargs):
    rank = int(os.environ["RANK"])
    gpus = torch.cuda.device_count()
    torch.cuda.set_device(rank % gpus)
    tdist.init_process_group(backend=backend, **kwargs)


def start_slurm(backend="nccl", port=None):
    task_id = int(os.environ["SLURM_PROCID"])
    ntasks = int(os.environ["SLURM_NTASKS"])
    gpus = torch.cuda.device_count()
    torch.cuda.set_device(task_id % gpus)
    os.environ["WORLD_SIZE"] = str(ntasks)
    os.environ["RANK"] = str(task_id)
    tdist.init_process_group(backend=backend)
