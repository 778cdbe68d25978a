"""The script's own process-group timeout (2 s) is shorter than rank 1's index build (8 s): torch
gives up on rank 0's barrier first, and torchrun stops rank 1 while it is still building."""
import datetime
import time

import torch.distributed as dist


def build_index():
    end = time.monotonic() + 8
    while time.monotonic() < end:
        time.sleep(0.05)  # [busy]


dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=2))
if dist.get_rank() == 1:
    build_index()
dist.barrier()  # [barrier]
