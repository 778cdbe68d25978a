import os

import torch


class RunState:
    def __init__(self, cpu=False):
        if not cpu and int(os.environ.get("LOCAL_RANK", -1)) != -1:
            self.mode = "multi_gpu"
            if not torch.distributed.is_initialized():
                torch.distributed.init_process_group(backend="nccl")
            self.n_procs = torch.distributed.get_world_size()
            self.proc_index = torch.distributed.get_rank()
            self.local_proc_index = int(os.environ.get("LOCAL_RANK", -1))
            self.device = torch.device("cuda", self.local_proc_index)
            torch.cuda.set_device(self.device)
            self.half = os.environ.get("USE_HALF", "0") == "1"
        else:
            self.mode = "single"
            self.n_procs = 1
            self.proc_index = self.local_proc_index = 0
            self.device = torch.device("cpu" if cpu or not torch.cuda.is_available() else "cuda")
