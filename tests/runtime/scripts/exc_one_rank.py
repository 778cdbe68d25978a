"""Rank 1 raises while rank 0 waits in a collective."""
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
if rank == 1:
    raise ValueError("bad batch on rank 1")  # [raise]
dist.barrier()  # [barrier]
