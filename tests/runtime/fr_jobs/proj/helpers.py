"""Helpers of the Flight Recorder test jobs (another file than the training loop)."""
import os
import time

import torch.distributed as dist


def average(t):
    dist.all_reduce(t)
    return t


def slow_io(until):
    # busy outside any collective: a stuck data loader, a slow file system
    while not os.path.exists(until):
        time.sleep(0.05)
