import torch
import torch.distributed as dist

from neo.arguments import configure_distributed


def init(args):
    args = configure_distributed(args)
    torch.cuda.set_device(args.local_rank)
    dist.init_process_group("nccl", rank=args.rank, world_size=args.world_size)
    return args
