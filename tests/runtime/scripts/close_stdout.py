"""Every rank closes its stdout and stderr, forks a child that outlives it, then finishes."""
import os
import sys
import time

import torch.distributed as dist

marker = sys.argv[1]
dist.init_process_group("gloo")
print("closing", flush=True)
if os.fork() == 0:  # a plain fork that lives on after the rank
    os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(300)", marker])
os.close(1)
os.close(2)
dist.barrier()
time.sleep(0.3)
