import random

import torch
from torch import nn


class ElasticBlocks(nn.Module):
    """A stack of blocks of which only a sampled prefix runs in each step."""

    def __init__(self, width=64, depth=6, classes=10):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.head = nn.Linear(width, classes)
        self.active_depth = depth
        self.depth_choices = list(range(1, depth + 1))

    def pick_depth(self, choices):
        self.depth_choices = list(choices)

    def sample_depth(self):
        self.active_depth = random.choice(self.depth_choices)

    def forward(self, x):
        for block in self.blocks[: self.active_depth]:
            x = torch.relu(block(x))
        return self.head(x)
