import torch


def mean_over_ranks(value):
    torch.distributed.all_reduce(value, op=torch.distributed.ReduceOp.SUM)
    return value / torch.distributed.get_world_size()


def to_device(batch, device):
    return {k: v.to(device) for k, v in batch.items()}
