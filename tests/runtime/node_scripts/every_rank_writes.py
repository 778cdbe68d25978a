"""Every rank writes the same metrics file (no rank guard at all), and its own per-rank file."""
import json
import os
import sys

import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
with open(os.path.join(sys.argv[1], "metrics.json"), "w") as f:  # [write]
    json.dump({"rank": rank}, f)
with open(os.path.join(sys.argv[1], f"rank{rank}.log"), "w") as f:
    f.write("ok\n")
with open(os.path.join(sys.argv[1], "shared.log"), "a") as f:
    f.write(f"rank {rank}\n")
dist.barrier()
dist.destroy_process_group()
