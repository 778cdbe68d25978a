import os
import sys
from collections import defaultdict

import torch
import torch.distributed as dist
import wandb


class RunningMean:
    def __init__(self):
        self.total = 0.0
        self.count = 0

    def update(self, value, n=1):
        self.total += value * n
        self.count += n

    @property
    def average(self):
        return self.total / max(self.count, 1)


class MetricLogger(object):
    def __init__(self, delimiter="\t", use_tracker=True):
        self.meters = defaultdict(RunningMean)
        self.delimiter = delimiter
        self.use_tracker = use_tracker

    def update(self, **kwargs):
        for name, value in kwargs.items():
            if isinstance(value, torch.Tensor):
                value = value.item()
            self.meters[name].update(value)
            if self.use_tracker:
                wandb.log({name: value})


def dist_ready():
    return dist.is_available() and dist.is_initialized()


def get_rank():
    if not dist_ready():
        return 0
    return dist.get_rank()


def is_main_process():
    return get_rank() == 0


def save_on_main(*args, **kwargs):
    if is_main_process():
        torch.save(*args, **kwargs)


def setup_distributed(args):
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        args.rank = int(os.environ["RANK"])
        args.world_size = int(os.environ["WORLD_SIZE"])
        args.gpu = int(os.environ["LOCAL_RANK"])
    elif "SLURM_PROCID" in os.environ:
        args.rank = int(os.environ["SLURM_PROCID"])
        args.gpu = args.rank % torch.cuda.device_count()
    elif torch.cuda.is_available():
        args.rank, args.gpu, args.world_size = 0, 0, 1
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = "29500"
    else:
        print("a GPU is required")
        sys.exit(1)
    dist.init_process_group(backend="nccl", init_method=args.dist_url,
                            world_size=args.world_size, rank=args.rank)
    torch.cuda.set_device(args.gpu)
    dist.barrier()
