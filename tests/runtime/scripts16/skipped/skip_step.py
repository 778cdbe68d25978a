"""DDP training where rank 1 skips backward once (an empty batch) with `continue`: its final
all_reduce of the loss meets rank 0's last gradient all-reduce."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
model = DDP(torch.nn.Linear(3, 1))
seen = 0.0
for step in range(3):
    batch = torch.ones(2, 3) if not (rank == 1 and step == 1) else torch.ones(0, 3)
    if batch.numel() == 0:
        continue  # [skip]
    loss = model(batch).sum()
    loss.backward()  # [bwd]
    seen += loss.item()
t = torch.tensor([seen])
dist.all_reduce(t)  # [metric]
