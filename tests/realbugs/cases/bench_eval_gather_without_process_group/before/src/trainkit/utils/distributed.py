import os

import torch
import torch.distributed as dist


def is_distributed():
    return dist.is_available() and dist.is_initialized()


def barrier():
    if is_distributed():
        dist.barrier()


def is_main_process():
    if not is_distributed():
        return True
    return dist.get_rank() == 0


def get_world_size():
    return int(os.getenv("WORLD_SIZE", "1"))


def gather_scalar_from_all_ranks(fn, world_size=1):
    """Evaluates fn on every rank; rank 0 gets the list of values, the others None."""
    value = torch.tensor(fn(), device=dist.get_rank()).float()
    if not is_main_process():
        dist.gather(value, dst=0)
        return None
    slots = [torch.zeros_like(value) for _ in range(world_size)]
    dist.gather(value, gather_list=slots, dst=0)
    return [int(t.item()) if t == t.int() else float(t.item()) for t in slots]
