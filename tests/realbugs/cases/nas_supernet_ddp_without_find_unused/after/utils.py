import os

import torch
import torch.distributed as dist


def setup_distributed(args):
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        args.rank = int(os.environ["RANK"])
        args.world_size = int(os.environ["WORLD_SIZE"])
        args.gpu = int(os.environ["LOCAL_RANK"])
    else:
        print("running on a single process")
        args.distributed = False
        return
    args.distributed = True
    torch.cuda.set_device(args.gpu)
    dist.init_process_group(backend="nccl", init_method="env://",
                            world_size=args.world_size, rank=args.rank)
    dist.barrier()


def teardown_distributed(args):
    if args.distributed:
        dist.destroy_process_group()
