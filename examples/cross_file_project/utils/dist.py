"""Distributed helpers, as many training repositories keep them in utils/."""
import torch
import torch.distributed as dist


def is_main_process() -> bool:
    return dist.get_rank() == 0


def all_gather_metrics(metrics: dict) -> list:
    out = [None for _ in range(dist.get_world_size())]
    dist.all_gather_object(out, metrics)
    return out


def mean_over_ranks(t: torch.Tensor) -> torch.Tensor:
    t = t.clone()
    dist.all_reduce(t)
    return t / dist.get_world_size()
