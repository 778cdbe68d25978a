import os

import torch
import torch.distributed as dist


def initialize_distributed():
    rank = int(os.environ["LOCAL_RANK"])
    world_size = torch.cuda.device_count()
    torch.cuda.set_device(rank)
    dist.init_process_group(backend="nccl", world_size=world_size, rank=rank)


def main():
    initialize_distributed()
    t = torch.ones(1, device="cuda")
    dist.all_reduce(t)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
