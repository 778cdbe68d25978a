"""600 quick all_reduces (well past a small DDP_LINT_LOG_BUDGET) and each rank's log size; then
with "exit", rank 1 leaves while rank 0 waits in barrier(). With "forever", all_reduce never stops
(straight away: the endless loop itself goes past the budget within its first few dozen calls, and
a loaded machine cannot leave a rank still in the 600 when the short hang timeout fires)."""
import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(1)
for _ in range(0 if sys.argv[1:] == ["forever"] else 600):
    dist.all_reduce(t)
log = os.path.join(os.environ["DDP_LINT_LOG_DIR"], f"rank-{dist.get_rank()}.jsonl")
print(f"LOGSIZE {dist.get_rank()} {os.path.getsize(log)}", flush=True)
if sys.argv[1:] == ["exit"]:
    if dist.get_rank() == 1:
        sys.exit(0)  # [exit]
    dist.barrier()  # [barrier]
while sys.argv[1:] == ["forever"]:  # [while]
    dist.all_reduce(t)  # [forever]
dist.destroy_process_group()
