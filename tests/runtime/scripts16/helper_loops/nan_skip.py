"""Rank 1 gets a NaN output at step 1 and skips the step with `continue`: it makes one gradient
sync fewer, so it finishes while rank 0 waits inside sync_grads() (a helper in another file)."""
import torch
import torch.distributed as dist

from grads import sync_grads

dist.init_process_group("gloo")
rank = dist.get_rank()
net = torch.nn.Linear(3, 1)
for i in range(3):
    out = net(torch.ones(1, 3) * i).sum()
    if rank == 1 and i == 1:
        out = out * float("nan")
    if torch.isnan(out):
        continue  # [skip]
    out.backward()
    sync_grads(net)
print("end", rank)
