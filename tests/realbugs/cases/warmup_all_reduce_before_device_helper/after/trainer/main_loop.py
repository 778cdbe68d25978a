import os

import torch
import torch.distributed as dist

from trainer.devices import pin_gpu, use_cpu


class SSLTrainer:
    def __init__(self, cfg, dist_rank, world_size):
        self.cfg = cfg
        self.dist_rank = dist_rank
        self.world_size = world_size
        self.local_rank = int(os.environ.get("LOCAL_RANK", 0))

    def setup_distributed(self, use_gpu):
        if not dist.is_initialized():
            dist.init_process_group(
                backend=self.cfg["backend"],
                init_method=self.cfg["init_method"],
                world_size=self.world_size,
                rank=self.dist_rank,
            )
        if use_gpu:
            pin_gpu(self.local_rank)
            if torch.cuda.is_available() and self.cfg["backend"] == "nccl":
                dist.all_reduce(torch.zeros(1).cuda())
        else:
            use_cpu()
