"""Rank 1 dies with SIGABRT (os.abort()) while rank 0 waits in a barrier."""
import os
import sys
import time

import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 1:
    time.sleep(0.3)
    os.abort()  # [abort]
dist.barrier()  # [barrier]
