# The seed's problem 1 (examples/seed_problem1_hang.py) on gloo: no .to(device_id), no
# device_ids, plus a rank-guarded barrier. `ddp-lint run` points at the barrier and at the
# all_gather_object line that rank 1 reached instead.
import os
import logging
import torch
import torch.nn as nn
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
    dist.init_process_group("gloo")
    rank = dist.get_rank()

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
        ToyModel(),
    )
    metrics = {"rank":rank}
    if rank == 0:
        dist.barrier()  # [barrier]
    output = [None for _ in range(dist.get_world_size())]
    dist.all_gather_object(output, metrics)  # [gather]
    print(output)
