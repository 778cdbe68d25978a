"""Each rank prints 6 MB of lines as fast as it can, then both meet in a barrier and finish: a run
that is clean unless forwarding the output holds the ranks back."""
import sys

import torch.distributed as dist

dist.init_process_group("gloo")
line = f"rank {dist.get_rank()} says " + "x" * 90 + "\n"
for _ in range(60000):
    sys.stdout.write(line)  # [print]
sys.stdout.flush()
dist.barrier()
print("DONE", dist.get_rank(), flush=True)
dist.destroy_process_group()
