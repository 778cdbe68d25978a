"""Rank 1 is killed by SIGKILL (as the OOM killer does) a few fast steps after a slow set-up: the
sampler last saw it in the set-up; the collective log saw it later, in the loop."""
import os
import signal
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
time.sleep(1.0)  # [setup]
t = torch.ones(4)
for step in range(3):  # [loop]
    dist.all_reduce(t)  # [step]
    if rank == 1 and step == 1:
        os.kill(os.getpid(), signal.SIGKILL)  # [killed]
print("done", rank)
