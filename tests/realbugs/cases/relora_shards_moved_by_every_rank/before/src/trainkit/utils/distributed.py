import torch.distributed as dist


def is_distributed():
    return dist.is_available() and dist.is_initialized()


def is_main_process():
    if not is_distributed():
        return True
    return dist.get_rank() == 0


def barrier():
    if is_distributed():
        dist.barrier()
