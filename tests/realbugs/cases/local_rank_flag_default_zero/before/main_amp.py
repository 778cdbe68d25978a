import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def parse():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", default=90, type=int)
    parser.add_argument("--local_rank", default=0, type=int)
    return parser.parse_args()


def main():
    args = parse()
    torch.cuda.set_device(args.local_rank)
    dist.init_process_group(backend="nccl", init_method="env://")
    model = DDP(torch.nn.Linear(8, 8).cuda(), device_ids=[args.local_rank])
    for _ in range(args.epochs):
        model(torch.randn(4, 8, device="cuda")).sum().backward()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
