"""Prints the run's private log folder and its mode."""
import os

import torch.distributed as dist

dist.init_process_group("gloo")
d = os.environ["DDP_LINT_LOG_DIR"]
print(f"LOGDIR {d} MODE {oct(os.stat(d).st_mode & 0o777)}", flush=True)
dist.barrier()
