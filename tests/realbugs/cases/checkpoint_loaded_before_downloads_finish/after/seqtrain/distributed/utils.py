import torch.distributed as dist


def global_rank():
    return dist.get_rank() if dist.is_initialized() else 0


def global_barrier():
    if dist.is_initialized():
        dist.barrier()
