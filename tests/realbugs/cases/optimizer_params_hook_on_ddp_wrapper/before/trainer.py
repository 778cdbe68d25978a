import os

import torch
import torch.distributed as dist
from torch import nn

from utils.optim import param_groups


class Captioner(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(16, 16)
        self.decoder = nn.Linear(16, 16)

    def forward(self, x):
        return self.decoder(self.encoder(x))

    def param_groups_for(self, cfg):
        return [{"params": self.encoder.parameters(), "lr": cfg["lr"] * 0.1},
                {"params": self.decoder.parameters(), "lr": cfg["lr"]}]


def build(cfg):
    model = Captioner()
    if cfg["distributed"]:
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl")
        model = nn.parallel.DistributedDataParallel(model.cuda(), device_ids=[local_rank])
    elif torch.cuda.device_count() > 1:
        model = nn.DataParallel(model.cuda())
    optimizer = torch.optim.Adam(param_groups(model, cfg), lr=cfg["lr"])
    return model, optimizer
