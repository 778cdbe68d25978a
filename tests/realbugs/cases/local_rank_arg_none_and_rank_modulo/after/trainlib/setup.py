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
        torch.cuda.set_device(args.local_rank)
        dev_id = torch.device(f"cuda:{args.local_rank}")
    else:
        dev_id = None
    torch.distributed.init_process_group(
        backend=args.dist_backend,
        world_size=args.world_size,
        rank=args.rank,
        timeout=timedelta(minutes=args.dist_timeout_minutes),
        device_id=dev_id,
    )
    return args
