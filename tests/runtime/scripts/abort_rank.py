"""Rank 1 aborts (a C-level crash: no Python exception) while rank 0 waits in barrier()."""
import os
import time

import torch.distributed as dist

dist.init_process_group("gloo")
dist.barrier()  # both ranks are past init (rank 0 may still be finishing its rendezvous otherwise)
if dist.get_rank() == 1:
    time.sleep(2)  # rank 0 is in the barrier below by now, even on a loaded machine
    os.abort()  # [abort]
dist.barrier()  # [barrier]
