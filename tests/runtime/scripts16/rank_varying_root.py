"""Each rank broadcasts from itself: src=rank makes every rank a root, so each waits for a sender
that never sends (gloo hangs; TORCH_DISTRIBUTED_DEBUG=DETAIL's fingerprint has no root to compare).
With "object", the same through broadcast_object_list."""
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
weights = torch.full((4,), float(rank))
if sys.argv[1:] == ["object"]:
    dist.broadcast_object_list([{"rank": rank}], src=rank)  # [obj]
else:
    dist.broadcast(weights, src=rank)  # [bcast]
dist.destroy_process_group()
