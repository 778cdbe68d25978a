"""Rank 1 saw no items: total_count() returns before its all_reduce; rank 1 goes on to the barrier."""
import torch.distributed as dist

from helpers import total_count

dist.init_process_group("gloo")
rank = dist.get_rank()
counts = [3, 4] if rank == 0 else []
print(total_count(counts))
dist.barrier()  # [barrier]
