"""Near miss of scripts16/unused_param.py: the head is used, but only when a flag from the
environment says so, which the static rule DDP209 cannot prove unused (a literal or an argparse
default it can: stop 46). The run fails the same way; its hint names no rule."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(torch.nn.Module):
    def __init__(self, use_head):
        super().__init__()
        self.body = torch.nn.Linear(4, 4)
        self.head = torch.nn.Linear(4, 1)
        self.use_head = use_head

    def forward(self, x):
        h = self.body(x)
        return self.head(h) if self.use_head else h


dist.init_process_group("gloo")
model = DDP(Net(use_head=os.environ.get("WITH_HEAD") == "1"))
for step in range(3):
    out = model(torch.randn(8, 4))  # [forward]
    out.sum().backward()
