"""Helpers of a small project: each makes a collective that some path can go past."""
import torch
import torch.distributed as dist


def total_count(counts):
    if len(counts) == 0:
        return 0  # [ret]
    t = torch.tensor([float(sum(counts))])
    dist.all_reduce(t)  # [reduce]
    return t.item()


@torch.no_grad()
def score(model, xs):
    model.eval()
    s = sum(model(x).sum().item() for x in xs)  # [fwd]
    model.train()
    return s
