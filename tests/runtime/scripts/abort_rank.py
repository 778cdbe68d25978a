"""Rank 1 aborts (a C-level crash: no Python exception) while rank 0 waits in barrier()."""
import os

import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 1:
    os.abort()  # [abort]
dist.barrier()  # [barrier]
