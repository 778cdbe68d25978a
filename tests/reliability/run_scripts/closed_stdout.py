"""Both ranks close their stdout and stderr, then rank 0 spins forever while rank 1 waits."""
import os
import time

import torch.distributed as dist

dist.init_process_group("gloo")
print("closing", flush=True)
os.close(1)
os.close(2)
if dist.get_rank() == 0:
    while True:
        time.sleep(0.05)  # [spin]
dist.barrier()  # [barrier]
