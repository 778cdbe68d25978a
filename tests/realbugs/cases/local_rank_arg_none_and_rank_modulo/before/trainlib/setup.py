import os
from datetime import timedelta

import torch

from trainlib.arguments import parse


def init_distributed(argv=None):
    args = parse(argv)
    args.rank = int(os.getenv("RANK", "0"))
    args.world_size = int(os.getenv("WORLD_SIZE", "1"))
    n_dev = torch.cuda.device_count()
    if n_dev > 0:
        dev = args.rank % n_dev
        if args.local_rank is not None:
            assert args.local_rank == dev, "local rank should equal rank % device count"
        else:
            args.local_rank = dev
        torch.cuda.set_device(dev)
    torch.distributed.init_process_group(
        backend=args.dist_backend,
        world_size=args.world_size,
        rank=args.rank,
        timeout=timedelta(minutes=args.dist_timeout_minutes),
    )
    return args
