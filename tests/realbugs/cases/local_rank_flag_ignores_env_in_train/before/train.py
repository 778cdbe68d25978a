import argparse
import os

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", default=0, type=int)
parser.add_argument("--epochs", default=10, type=int)


def main():
    args = parser.parse_args()
    args.distributed = int(os.environ.get("WORLD_SIZE", 1)) > 1
    args.device = "cuda:0"
    args.world_size = 1
    args.rank = 0
    if args.distributed:
        args.device = "cuda:%d" % args.local_rank
        torch.cuda.set_device(args.local_rank)
        dist.init_process_group(backend="nccl", init_method="env://")
        args.world_size = dist.get_world_size()
        args.rank = dist.get_rank()
    model = torch.nn.Linear(4, 4).to(args.device)
    if args.distributed:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[args.local_rank])
    return model


if __name__ == "__main__":
    main()
