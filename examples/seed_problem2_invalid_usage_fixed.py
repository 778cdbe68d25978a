# FIXED by `ddp-lint check --fix`. Seed problem 2: NCCL "invalid usage" in dist.all_gather_object. Two bugs: no
# torch.cuda.set_device(...) (both ranks on cuda:0, the NCCL error), and an output list sized to
# the 3 objects instead of the world size. Launch: torchrun --nproc-per-node 2 seed_problem2_invalid_usage.py
import os
import logging
import torch
import torch.nn as nn
import torch.multiprocessing as mp
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler
from torch.utils.data import Dataset, DataLoader, TensorDataset

logger = logging.getLogger("demo")
logger.addHandler(logging.StreamHandler())
logger.setLevel(logging.INFO)

class ToyModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(3, 3)
    def forward(self, x):
        return self.linear(x)

if __name__ == "__main__":
    '''torch setup'''
    # reserve_gpu([2,3])
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    device_id = rank % torch.cuda.device_count()
    torch.cuda.set_device(device_id)
    gather_objects = ["foo", 12, {1: 2}] # any picklable object
    output = [None for _ in range(dist.get_world_size())]
    dist.all_gather_object(output, gather_objects[dist.get_rank()])
    print(output)
    dist.destroy_process_group()
