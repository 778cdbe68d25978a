import os
import sys

import torch

torch.zeros(1, device=f"cuda:{os.environ['LOCAL_RANK']}", requires_grad=True).sum().backward()
import torch.distributed as dist

rank = int(os.environ["RANK"])
local_rank = int(os.environ["LOCAL_RANK"])
world_size = int(os.environ["WORLD_SIZE"])
device = torch.device("cuda", local_rank)
torch.cuda.set_device(device)
dist.init_process_group(backend="nccl", device_id=device)
model = torch.nn.Linear(16, 16).to(device)
for p in model.parameters():
    dist.broadcast(p.detach(), 0)
for step in range(int(sys.argv[1]) if len(sys.argv) > 1 else 10):
    loss = model(torch.randn(4, 16, device=device)).square().mean()
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)
dist.destroy_process_group()
