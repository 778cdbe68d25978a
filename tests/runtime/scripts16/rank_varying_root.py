"""Each rank broadcasts from itself: src=rank makes every rank a root, so each waits for a sender
that never sends (gloo hangs; TORCH_DISTRIBUTED_DEBUG=DETAIL's fingerprint has no root to compare)."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
weights = torch.full((4,), float(rank))
dist.broadcast(weights, src=rank)  # [bcast]
dist.destroy_process_group()
