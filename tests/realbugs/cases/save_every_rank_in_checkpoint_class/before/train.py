import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from pkg.checkpoint import Checkpoint


class Trainer:
    def __init__(self):
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl")
        self.model = DDP(torch.nn.Linear(4, 4).cuda(), device_ids=[local_rank])
        self.checkpoint = Checkpoint(self, "model.pth")

    def train(self):
        for step in range(10):
            self.model(torch.randn(2, 4, device="cuda")).sum().backward()
            self.checkpoint.save(step)
        self.checkpoint.finalize()
        dist.destroy_process_group()


if __name__ == "__main__":
    Trainer().train()
