"""Rank 0 prints 50 MB; the run must neither block nor keep it all in memory."""
import sys

import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 0:
    block = ("x" * 1023 + "\n") * 1024  # 1 MiB
    for _ in range(50):
        sys.stdout.write(block)
    sys.stdout.flush()
dist.barrier()
dist.destroy_process_group()
