import torch.distributed as dist


def wait_for_everyone():
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
