"""The script fixes world_size=4; the run has 2 ranks: init_process_group waits for ranks that never come."""
import os

import torch.distributed as dist

dist.init_process_group("gloo", rank=int(os.environ["RANK"]), world_size=4)  # [init]
dist.barrier()
