"""A collective under a rank guard: rank 0 is in barrier(), rank 1 in all_gather_object()."""
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
if rank == 0:
    dist.barrier()  # [barrier]
out = [None] * dist.get_world_size()
dist.all_gather_object(out, {"rank": rank})  # [gather]
print(out)
