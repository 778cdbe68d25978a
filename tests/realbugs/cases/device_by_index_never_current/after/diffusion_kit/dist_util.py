"""
Process-group helpers for multi-GPU training launched with mpiexec.
"""

import io
import os
import socket

from mpi4py import MPI
import torch as th
import torch.distributed as dist

# How many GPUs each machine has; a rank uses GPU (rank % GPUS_PER_NODE).
GPUS_PER_NODE = 8


def setup_dist():
    """
    Create the default process group from the MPI world.
    """
    if dist.is_initialized():
        return
    os.environ["CUDA_VISIBLE_DEVICES"] = f"{MPI.COMM_WORLD.Get_rank() % GPUS_PER_NODE}"

    world = MPI.COMM_WORLD
    use_nccl = th.cuda.is_available()
    backend = "nccl" if use_nccl else "gloo"
    address = socket.gethostbyname(socket.getfqdn()) if use_nccl else "localhost"
    os.environ["MASTER_ADDR"] = world.bcast(address, root=0)
    os.environ["MASTER_PORT"] = str(world.bcast(_free_port(), root=0))
    os.environ["RANK"] = str(world.rank)
    os.environ["WORLD_SIZE"] = str(world.size)
    dist.init_process_group(backend=backend, init_method="env://")


def dev():
    """
    The device this process computes on.
    """
    if th.cuda.is_available():
        return th.device("cuda")
    return th.device("cpu")


def load_state_dict(path, **kwargs):
    """
    Read a checkpoint once (on MPI rank 0) and hand the bytes to every rank.
    """
    if MPI.COMM_WORLD.Get_rank() == 0:
        with open(path, "rb") as f:
            payload = f.read()
    else:
        payload = None
    payload = MPI.COMM_WORLD.bcast(payload)
    return th.load(io.BytesIO(payload), **kwargs)


def sync_params(params):
    """
    Copy rank 0's values of these tensors to every rank.
    """
    for p in params:
        with th.no_grad():
            dist.broadcast(p, 0)


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("", 0))
        return sock.getsockname()[1]
