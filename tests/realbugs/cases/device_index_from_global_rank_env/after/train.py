import os

import torch
from torch.distributed import init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP

out_dir = "out"
backend = "nccl"
use_ddp = int(os.environ.get("RANK", -1)) != -1
if use_ddp:
    init_process_group(backend=backend)
    proc_rank = int(os.environ["RANK"])
    node_rank = int(os.environ["LOCAL_RANK"])
    device = f"cuda:{node_rank}"
    is_main = proc_rank == 0
    seed_shift = proc_rank
else:
    is_main = True
    seed_shift = 0
    device = "cuda"

if is_main:
    os.makedirs(out_dir, exist_ok=True)
torch.manual_seed(42 + seed_shift)
model = torch.nn.Linear(64, 64).to(device)
if use_ddp:
    model = DDP(model, device_ids=[node_rank])
for it in range(100):
    model(torch.randn(4, 64, device=device)).sum().backward()
    if it % 10 == 0 and is_main:
        torch.save(model.state_dict(), os.path.join(out_dir, "ckpt.pt"))
