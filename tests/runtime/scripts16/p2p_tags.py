"""A pipeline hand-off whose tags disagree: rank 0 sends activations with tag 7, rank 1 waits for
tag 8; both block."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
acts = torch.zeros(4)
if dist.get_rank() == 0:
    dist.send(acts + 1, dst=1, tag=7)  # [send]
else:
    dist.recv(acts, src=0, tag=8)  # [recv]
