"""The model on cuda:local_rank, no set_device, then a barrier: DDP's constructor broadcast the
parameters over NCCL on cuda:local_rank, so the barrier runs there too (the first device this
group used): no hang."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

local_rank = int(os.environ["LOCAL_RANK"])
dist.init_process_group("nccl")
model = DDP(torch.nn.Linear(4, 4).to(local_rank), device_ids=[local_rank])
model(torch.randn(2, 4, device=local_rank)).sum().backward()
dist.barrier()  # [barrier]
dist.destroy_process_group()
