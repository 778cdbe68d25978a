"""An earlier new_group() called by one rank only (under a rank condition): the next new_group()
pairs up wrongly, and rank 0 waits in its second new_group() for a peer that never comes."""
import torch
import torch.distributed as dist


def make_groups(rank):
    if rank == 0:  # [guard]
        dist.new_group([0, 1])  # [early]
    return dist.new_group([0, 1])  # [hang]


dist.init_process_group("gloo")
rank = dist.get_rank()
group = make_groups(rank)
t = torch.ones(1)
dist.all_reduce(t, group=group)
dist.destroy_process_group()
