"""Rank 0 starts children that ignore SIGTERM, in sessions of their own, one even without the
run's environment, then finishes normally. Nothing may survive the run. argv[1] is a marker."""
import subprocess
import sys
import time

import torch.distributed as dist

marker = sys.argv[1]
code = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True: time.sleep(1)\n"
dist.init_process_group("gloo")
if dist.get_rank() == 0:
    subprocess.Popen([sys.executable, "-c", code, marker], start_new_session=True)
    subprocess.Popen([sys.executable, "-c", code, marker], start_new_session=True, env={"PATH": "/usr/bin:/bin"})
    time.sleep(1.0)
    print("children started", flush=True)
dist.barrier()
