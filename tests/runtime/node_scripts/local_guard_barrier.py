"""A collective under `local_rank == 0`: true once per node, so on 2 nodes ranks 0 and 2 call it."""
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
local_rank = int(os.environ["LOCAL_RANK"])
if local_rank == 0:
    dist.barrier()  # [barrier]
t = torch.ones(1)
dist.all_reduce(t)  # [all_reduce]
dist.destroy_process_group()
