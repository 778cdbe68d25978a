"""Rank 1 fails to read its config while rank 0 is still busy preparing data (not yet in any
collective): rank 0's line is part of the picture."""
import time

import torch.distributed as dist


def prepare():
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        time.sleep(0.05)  # [busy]


dist.init_process_group("gloo")
if dist.get_rank() == 1:
    raise FileNotFoundError("config.yaml")  # [raise]
prepare()
dist.barrier()
