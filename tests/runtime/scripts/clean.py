"""A correct 2-rank gloo script: no findings."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(2) * (rank + 1)
dist.all_reduce(t)
out = [None for _ in range(dist.get_world_size())]
dist.all_gather_object(out, {"rank": rank})
dist.barrier()
print(f"rank {rank}: sum={t.tolist()} gathered={out}")
dist.destroy_process_group()
