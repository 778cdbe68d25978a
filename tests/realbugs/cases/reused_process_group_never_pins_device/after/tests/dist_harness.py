import os

import torch
import torch.distributed as dist


class DistributedCase:
    world_size = 2
    backend = "nccl"

    def run(self, **kwargs):
        raise NotImplementedError

    def _dist_run(self, local_rank, num_procs, port):
        if dist.is_initialized():
            if torch.cuda.is_available():
                torch.cuda.set_device(dist.get_rank())
        else:
            os.environ["MASTER_ADDR"] = "127.0.0.1"
            os.environ["MASTER_PORT"] = str(port)
            os.environ["LOCAL_RANK"] = str(local_rank)
            dist.init_process_group(self.backend, rank=local_rank, world_size=num_procs)
            if torch.cuda.is_available():
                torch.cuda.set_device(local_rank)
        self.run()
        t = torch.ones(1, device="cuda")
        dist.all_reduce(t)
