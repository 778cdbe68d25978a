# FIXED by `ddp-lint check --fix`. Seed problem 1 (a Stack Exchange question by K. Zhu): the job hangs in
# dist.all_gather_object. Root cause: no torch.cuda.set_device(...), so every rank's object
# collective runs on cuda:0. Launch: torchrun --nproc-per-node 2 seed_problem1_hang.py
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
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    device_id = rank % torch.cuda.device_count()
    torch.cuda.set_device(device_id)

    '''train'''
    x = []
    for inst in range(12):
        x.append(torch.randn(3))
    x=torch.stack(x)
    dataset = TensorDataset(x)
    sampler = DistributedSampler(dataset=dataset)
    loader = DataLoader(
        dataset=dataset,
        num_workers=8,
        pin_memory=True,
        sampler=sampler
    )
    model = DDP(
        ToyModel().to(device_id),
        device_ids=[device_id],
    )
    metrics = {"rank":rank}
    # for epoch in range(1):
    #     for idx, x in enumerate(loader):
    #         logger.info(f'<{os.getpid()}>: {idx}, {x}')
    output = [None for _ in range(dist.get_world_size())]
    dist.all_gather_object(output, metrics)
    print(output)
    dist.destroy_process_group()
