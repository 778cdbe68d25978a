"""The same mistake in plain module code, and rank 1 has nothing left to do: it finishes while
rank 0 waits in its second new_group()."""
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
if rank == 0:  # [guard]
    solo = dist.new_group([0])  # [early]
pair = dist.new_group([0, 1])  # [hang]
