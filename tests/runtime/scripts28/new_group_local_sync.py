"""A near miss: new_group(use_local_synchronization=True) is named from its ranks, not by call
order, and only its members call it. Rank 0 makes one such group on its own; both ranks then make
the pair's group: no hang."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
if rank == 0:
    solo = dist.new_group([0], use_local_synchronization=True)
pair = dist.new_group([0, 1])
t = torch.ones(1)
dist.all_reduce(t, group=pair)
assert t.item() == 2.0
dist.destroy_process_group()
