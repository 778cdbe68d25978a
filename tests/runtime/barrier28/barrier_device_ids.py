"""barrier(device_ids=[local_rank]) without set_device: NCCL uses device_ids[0]."""
import os

import torch.distributed as dist

local_rank = int(os.environ["LOCAL_RANK"])
dist.init_process_group("nccl")
dist.barrier(device_ids=[local_rank])  # [barrier]
dist.destroy_process_group()
