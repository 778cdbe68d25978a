import os

import torch
import torch.distributed as tdist


def start_mpi(backend="nccl", **kwargs):
    node_rank = int(os.environ["OMPI_COMM_WORLD_LOCAL_RANK"])
    torch.cuda.set_device(node_rank)
    os.environ.setdefault("MASTER_PORT", "29500")
    if "MASTER_ADDR" not in os.environ:
        raise KeyError("MASTER_ADDR is not set")
    os.environ["WORLD_SIZE"] = os.environ["OMPI_COMM_WORLD_SIZE"]
    os.environ["RANK"] = os.environ["OMPI_COMM_WORLD_RANK"]
    tdist.init_process_group(backend=backend, **kwargs)
