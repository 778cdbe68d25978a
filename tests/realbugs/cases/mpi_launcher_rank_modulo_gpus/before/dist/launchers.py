import os

import torch
import torch.distributed as tdist


def start_mpi(backend="nccl", **kwargs):
    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    gpus = torch.cuda.device_count()
    torch.cuda.set_device(rank % gpus)
    tdist.init_process_group(backend=backend, **kwargs)
