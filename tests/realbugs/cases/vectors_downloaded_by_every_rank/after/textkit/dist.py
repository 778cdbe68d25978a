import torch.distributed as dist


def is_main():
    return not dist.is_initialized() or dist.get_rank() == 0


def sync():
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()
