"""init_process_group(device_id=cuda:local_rank) binds the group's device: the barrier runs there."""
import os

import torch
import torch.distributed as dist

local_rank = int(os.environ["LOCAL_RANK"])
dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
dist.barrier()  # [barrier]
dist.destroy_process_group()
