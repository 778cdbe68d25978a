"""Correct: each rank on its own GPU, CPU inputs; DDP's forward moves them to device_ids[0]."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl")
ddp = DDP(torch.nn.Linear(4, 1).to(local_rank), device_ids=[local_rank])
x = torch.randn(8, 4)  # on the CPU
out = ddp(x)
assert out.device == torch.device("cuda", local_rank), out.device
out.sum().backward()
print("OK", local_rank, out.device, flush=True)
dist.destroy_process_group()
