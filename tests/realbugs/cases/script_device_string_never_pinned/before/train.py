import os

import torch
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP

backend = "nccl"
max_iters = 100
in_ddp = int(os.environ.get("RANK", -1)) != -1
if in_ddp:
    init_process_group(backend=backend)
    global_rank = int(os.environ["RANK"])
    node_rank = int(os.environ["LOCAL_RANK"])
    device = f"cuda:{node_rank}"
    is_main = global_rank == 0
    seed_shift = global_rank
else:
    device = "cuda"
    is_main = True
    seed_shift = 0
torch.manual_seed(1234 + seed_shift)
model = torch.nn.Linear(32, 32).to(device)
if in_ddp:
    model = DDP(model, device_ids=[node_rank])
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
for it in range(max_iters):
    loss = model(torch.randn(8, 32, device=device)).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
if in_ddp:
    destroy_process_group()
