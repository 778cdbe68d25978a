import os

import torch
import torch.distributed as dist


class PartialState:
    def __init__(self):
        self.process_index = int(os.environ.get("RANK", 0))
        self.local_process_index = int(os.environ.get("LOCAL_RANK", 0))
        dist.init_process_group("nccl")

    def wait_for_everyone(self):
        dist.barrier()
