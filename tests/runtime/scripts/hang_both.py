"""Both ranks sleep forever (used by the cancel test)."""
import time

import torch.distributed as dist

dist.init_process_group("gloo")
print("READY", flush=True)
while True:
    time.sleep(0.1)
