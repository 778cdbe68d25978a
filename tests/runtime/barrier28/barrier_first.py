"""A barrier before any other collective, no set_device, no device_id: torch 2.13's NCCL barrier
runs on GPU `global rank % device count`, one GPU per rank of a node (it warns, it does not hang)."""
import os

import torch
import torch.distributed as dist

local_rank = int(os.environ["LOCAL_RANK"])
dist.init_process_group("nccl")
dist.barrier()  # [barrier]
x = torch.ones(2, device=f"cuda:{local_rank}")
dist.all_reduce(x)
dist.destroy_process_group()
