"""Rank 1 is killed by SIGKILL (as the OOM killer does) while allocating; rank 0 waits in DDP's
all-reduce in backward()."""
import os
import signal
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def grow():
    time.sleep(1.5)
    os.kill(os.getpid(), signal.SIGKILL)  # [killed]


dist.init_process_group("gloo")
rank = dist.get_rank()
model = DDP(torch.nn.Linear(4, 1))
for step in range(3):
    if rank == 1 and step == 1:
        grow()  # [call]
    model(torch.randn(8, 4)).sum().backward()  # [wait]
