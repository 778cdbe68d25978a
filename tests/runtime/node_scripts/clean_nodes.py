"""A correct multi-node script: the device from LOCAL_RANK, one checkpoint written by global rank 0."""
import os
import sys

import torch
import torch.distributed as dist

local_rank = int(os.environ["LOCAL_RANK"])
dist.init_process_group("nccl")
torch.cuda.set_device(local_rank)
assert torch.cuda.device_count() == int(os.environ["LOCAL_WORLD_SIZE"])
assert dist.get_world_size() == int(os.environ["WORLD_SIZE"])
t = torch.ones(4, device=f"cuda:{local_rank}")
dist.all_reduce(t)
assert t[0].item() == dist.get_world_size()
out = [None] * dist.get_world_size()
dist.all_gather_object(out, (os.environ["GROUP_RANK"], local_rank))
if dist.get_rank() == 0:
    print("placement", out, flush=True)
    if len(sys.argv) > 1:
        torch.save({"t": t.cpu()}, sys.argv[1])
dist.barrier()
dist.destroy_process_group()
