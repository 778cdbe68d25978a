import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


class UserDDP(DistributedDataParallel):
    def forward(self, *inputs, **kwargs):
        return self.module.training_step(*inputs, **kwargs)


class FitLoop:
    def ddp_worker(self, gpu_nb, model):
        self.global_idx = int(os.environ.get("NODE_RANK", 0)) * self.gpus_per_node + gpu_nb
        torch.cuda.set_device(gpu_nb)
        dist.init_process_group("nccl", rank=self.global_idx, world_size=self.world_size)
        model.cuda(gpu_nb)
        self.opts = model.configure_optimizers()
        model = UserDDP(model, device_ids=[gpu_nb])
        self._pretrain(model)

    def _pretrain(self, model):
        self.model = model
