"""Each rank starts a forked child and a subprocess in its own session (both sleeping, the marker
argv[1] in their command line), writes READY-<rank> into the folder argv[2], and then hangs in
a barrier that never completes, so only a kill ends the run."""
import os
import subprocess
import sys
import time

import torch.distributed as dist

marker, ready = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo")
sleeper = [sys.executable, "-c", "import time, sys; time.sleep(600)", marker]
if os.fork() == 0:
    os.execv(sys.executable, sleeper)
subprocess.Popen(sleeper, start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                 stderr=subprocess.DEVNULL)
open(os.path.join(ready, f"READY-{dist.get_rank()}"), "w").close()
if dist.get_rank() == 0:
    time.sleep(600)
dist.barrier()
