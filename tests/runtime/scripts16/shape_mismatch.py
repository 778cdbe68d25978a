"""Ranks all_reduce tensors of different sizes (5 vs 4)."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(5 - rank)
dist.all_reduce(t)  # [reduce]
dist.destroy_process_group()
