"""Each rank leaves processes behind: a forked child, a daemon (double fork + setsid) and a
subprocess in its own session, all sleeping with the marker (argv[1]) in their command line."""
import os
import subprocess
import sys
import time

import torch.distributed as dist

marker = sys.argv[1]
dist.init_process_group("gloo")
sleeper = [sys.executable, "-c", "import time, sys; time.sleep(600)", marker]
if os.fork() == 0:  # a plain forked child
    os.execv(sys.executable, sleeper)
if os.fork() == 0:  # a classic daemon: fork, setsid, fork again, parent exits
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, sleeper)
    os._exit(0)
subprocess.Popen(sleeper, start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                 stderr=subprocess.DEVNULL)
time.sleep(0.5)
print("children started", flush=True)
dist.barrier()
dist.destroy_process_group()
