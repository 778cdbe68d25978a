# model.cuda() without torch.cuda.set_device: every rank's module is on cuda:0, and DDP's
# constructor broadcasts it over NCCL ("Duplicate GPU detected" on a real node).
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

if __name__ == "__main__":
    dist.init_process_group("nccl")  # [init]
    model = nn.Linear(3, 3).cuda()
    ddp = DDP(model)  # [ddp]
    print("unreachable on a real node")
