import os

import torch
from torch.distributed import init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP

out_dir = "out"
backend = "nccl"
use_ddp = int(os.environ.get("RANK", -1)) != -1
if use_ddp:
    init_process_group(backend=backend)
    gpu_idx = int(os.environ["RANK"])
    device = f"cuda:{gpu_idx}"
else:
    gpu_idx = 0
    device = "cuda"

if gpu_idx == 0:
    os.makedirs(out_dir, exist_ok=True)
torch.manual_seed(42 + gpu_idx)
model = torch.nn.Linear(64, 64).to(device)
if use_ddp:
    model = DDP(model, device_ids=[gpu_idx])
for it in range(100):
    model(torch.randn(4, 64, device=device)).sum().backward()
    if it % 10 == 0 and gpu_idx == 0:
        torch.save(model.state_dict(), os.path.join(out_dir, "ckpt.pt"))
