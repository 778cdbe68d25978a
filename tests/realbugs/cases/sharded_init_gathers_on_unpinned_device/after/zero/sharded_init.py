import os

import torch
import torch.distributed as dist


class ShardedInit:
    def __init__(self, module=None, process_group=None, offload_device=None):
        if not dist.is_initialized():
            dist.init_process_group(backend="nccl")
        self.group = process_group
        self.rank = dist.get_rank(group=self.group)
        self.world_size = dist.get_world_size(group=self.group)
        self.compute_device = torch.device("cuda:{}".format(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(self.compute_device)
        self.offload_device = offload_device or self.compute_device

    def gather(self, shard):
        shard = shard.to(self.compute_device)
        out = torch.empty(shard.numel() * self.world_size, dtype=shard.dtype, device=self.compute_device)
        dist.all_gather_into_tensor(out, shard, group=self.group)
        return out
