import torch.distributed as dist


def is_master():
    return not dist.is_initialized() or dist.get_rank() == 0
