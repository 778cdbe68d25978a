import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main(args):
    assert torch.cuda.is_available(), "needs a GPU"
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    device = rank % torch.cuda.device_count()
    torch.cuda.set_device(device)
    torch.manual_seed(args.seed * dist.get_world_size() + rank)
    if rank == 0:
        os.makedirs(args.results_dir, exist_ok=True)
    model = torch.nn.Linear(16, 16).to(device)
    ema = torch.nn.Linear(16, 16).to(device)
    model = DDP(model, device_ids=[rank])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for step in range(args.steps):
        loss = model(torch.randn(4, 16, device=device)).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    dist.destroy_process_group()
    return ema


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--results-dir", default="results")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=100)
    main(p.parse_args())
