"""Rank 1's shard has one batch fewer: its loop ends first while rank 0 waits inside sync_grads().
The helper's loop over the parameters runs the same number of times on every rank."""
import torch
import torch.distributed as dist

from grads import sync_grads

dist.init_process_group("gloo")
rank = dist.get_rank()
net = torch.nn.Linear(3, 1)
shard = [torch.ones(1, 3)] * (3 - rank)
for x in shard:  # [loop]
    net(x).sum().backward()
    sync_grads(net)
print("end", rank)
