"""Rank 1 calls sys.exit(0) early while rank 0 waits for it in barrier()."""
import sys

import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 1:
    sys.exit(0)  # [exit]
dist.barrier()  # [barrier]
