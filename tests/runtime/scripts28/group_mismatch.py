"""Rank 0 all-reduces on a new group of both ranks, rank 1 waits in the default group's barrier:
DETAIL's fingerprints never meet (two groups), so nothing raises; the ranks deadlock at once."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
pair = dist.new_group([0, 1])
t = torch.ones(4)
if rank == 0:
    dist.all_reduce(t, group=pair)  # [reduce]
else:
    dist.barrier()  # [barrier]
dist.destroy_process_group()
