"""A rank-0-only helper that calls a barrier: rank 0 waits in barrier() inside save(); rank 1 goes
on and ends the script."""
import torch
import torch.distributed as dist


def save(state):
    torch.save(state, "/dev/null")
    dist.barrier()  # [wait]


dist.init_process_group("gloo")
rank = dist.get_rank()
state = {"w": torch.zeros(2)}
if rank == 0:  # [guard]
    save(state)
print("finished", rank)  # [last]
