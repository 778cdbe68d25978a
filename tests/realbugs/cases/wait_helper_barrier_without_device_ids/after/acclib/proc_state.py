import os

import torch
import torch.distributed


class ProcState:
    def __init__(self):
        self.backend = "nccl"
        torch.distributed.init_process_group(self.backend)
        self.process_index = torch.distributed.get_rank()
        self.local_process_index = int(os.environ.get("LOCAL_RANK", 0))
        self.kind = "MULTI_GPU"

    def wait_for_everyone(self):
        if self.kind in ("MULTI_GPU", "MULTI_CPU"):
            torch.distributed.barrier(device_ids=[self.process_index])
