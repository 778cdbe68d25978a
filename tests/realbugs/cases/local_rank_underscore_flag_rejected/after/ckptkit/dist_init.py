import os

import torch


def initialize_distributed(args, backend="nccl"):
    local_rank = int(args.local_rank)
    rank = int(os.getenv("RANK", "0"))
    world_size = int(os.getenv("WORLD_SIZE", "1"))
    torch.cuda.set_device(local_rank)
    torch.distributed.init_process_group(backend=backend, init_method="env://", world_size=world_size, rank=rank)
    return local_rank, rank, world_size
