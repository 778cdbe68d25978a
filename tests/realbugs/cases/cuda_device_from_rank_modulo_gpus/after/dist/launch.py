import os

import torch
import torch.distributed as tdist


def start_pytorch(backend="nccl", **kwargs):
    node_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(node_rank)
    tdist.init_process_group(backend=backend, **kwargs)


def start_slurm(backend="nccl", port=None):
    task_id = int(os.environ["SLURM_PROCID"])
    ntasks = int(os.environ["SLURM_NTASKS"])
    slurm_local = os.environ.get("SLURM_LOCALID")
    if slurm_local is not None:
        torch.cuda.set_device(int(slurm_local))
    else:
        torch.cuda.set_device(task_id % torch.cuda.device_count())
    os.environ["WORLD_SIZE"] = str(ntasks)
    os.environ["RANK"] = str(task_id)
    tdist.init_process_group(backend=backend)
