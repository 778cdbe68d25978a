import os

import torch


def launched_with_many_processes():
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def setup_device(args):
    args.distributed = False
    args.world_size = 1
    args.rank = 0
    args.local_rank = 0
    if launched_with_many_processes():
        args.local_rank = int(os.environ["LOCAL_RANK"])
        torch.distributed.init_process_group(backend=args.dist_backend, init_method=args.dist_url)
        args.world_size = torch.distributed.get_world_size()
        args.rank = torch.distributed.get_rank()
        args.distributed = True
    else:
        torch.distributed.init_process_group(backend=args.dist_backend, init_method=args.dist_url,
                                             world_size=1, rank=0)

    if torch.cuda.is_available():
        device = f"cuda:{args.local_rank}" if args.distributed else "cuda:0"
        torch.cuda.set_device(device)
    else:
        device = "cpu"
    args.device = device
    return device
