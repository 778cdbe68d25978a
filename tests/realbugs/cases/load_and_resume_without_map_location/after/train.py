import argparse
import os

import torch
from torch.nn.parallel import DistributedDataParallel

from models.ckpt_utils import resume

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", default=0, type=int)
parser.add_argument("--resume", default="")


def main():
    args = parser.parse_args()
    args.distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if args.distributed:
        torch.cuda.set_device(args.local_rank)
        torch.distributed.init_process_group(backend="nccl", init_method="env://")
    net = torch.nn.Linear(10, 10)
    start_epoch = 0
    if args.resume:
        _opt_state, start_epoch = resume(net, args.resume)
    net.cuda()
    if args.distributed:
        net = DistributedDataParallel(net, device_ids=[args.local_rank])
    return net, start_epoch


if __name__ == "__main__":
    main()
