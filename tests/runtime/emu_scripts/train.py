# A correct DDP training script. `python train.py nccl` is the GPU version (set_device, DDP on the
# rank's GPU); `python train.py gloo` is the same computation on the CPU.
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

if __name__ == "__main__":
    backend = sys.argv[1] if len(sys.argv) > 1 else "nccl"
    dist.init_process_group(backend)
    rank = dist.get_rank()
    world = dist.get_world_size()
    local_rank = int(os.environ["LOCAL_RANK"])
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)).to(device)
    ddp = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(100 + rank)
    data = torch.randn(30, 8, generator=g)
    target = data.sum(dim=1, keepdim=True)
    for step in range(5):
        x = data[step * 6:(step + 1) * 6].to(device, non_blocking=True)
        y = target[step * 6:(step + 1) * 6].to(device)
        loss = nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        avg = loss.detach().clone()
        dist.all_reduce(avg)
        avg /= world
        os.write(1, f"rank {rank} step {step} loss {avg.item():.9f}\n".encode())
    weights = sum(p.detach().double().sum().item() for p in model.parameters())
    metrics = {"rank": rank, "loss": round(avg.item(), 9), "weights": round(weights, 9)}
    out = [None] * world
    dist.all_gather_object(out, metrics)
    os.write(1, f"rank {rank} metrics {out}\n".encode())
    dist.destroy_process_group()
