import torch
import torch.distributed as dist


def is_distributed():
    return dist.is_available() and dist.is_initialized()


def is_main_process():
    return not is_distributed() or dist.get_rank() == 0


def reduce_and_broadcast(compute, combine):
    """Every rank computes a number; rank 0 combines all of them and sends the result back."""
    if not is_distributed():
        return combine([compute()])
    mine = torch.tensor(float(compute()), device="cuda")
    everyone = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, mine)
    result = torch.tensor(float(combine([t.item() for t in everyone])), device="cuda")
    dist.broadcast(result, src=0)
    return result.item()
