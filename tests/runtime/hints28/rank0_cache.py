"""Rank 0 prepares a cache file in a node-local folder, the others read it after a barrier: fine on
one node; on a second node the file does not exist."""
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
# each simulated node gets its own folder, as each real node has its own /tmp
local_dir = os.path.join(os.environ["CACHE_DIR"], "node" + os.environ.get("GROUP_RANK", "0"))
os.makedirs(local_dir, exist_ok=True)
path = os.path.join(local_dir, "vocab.pt")
if rank == 0:
    torch.save({"size": 10}, path)  # [write]
dist.barrier()
vocab = torch.load(path)  # [read]
dist.destroy_process_group()
