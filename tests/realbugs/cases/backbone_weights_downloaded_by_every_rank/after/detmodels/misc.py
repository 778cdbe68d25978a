import torch.distributed as dist


class NestedBatch:
    def __init__(self, tensors, mask):
        self.tensors = tensors
        self.mask = mask


def is_main_process():
    return not dist.is_initialized() or dist.get_rank() == 0
