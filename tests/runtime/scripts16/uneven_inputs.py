"""Uneven inputs: rank 1 has one batch fewer, leaves the loop and ends the script while rank 0 waits
in DDP's gradient all-reduce inside backward()."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
model = DDP(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
batches = [torch.randn(8, 4) for _ in range(5 - rank)]
for x in batches:  # [loop]
    opt.zero_grad()
    loss = model(x).sum()
    loss.backward()  # [wait]
    opt.step()
print("rank", rank, "done")  # [last]
