import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


class Trainer:
    def __init__(self, model, serialization_dir):
        self.local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(self.local_rank)
        dist.init_process_group("nccl")
        self.model = model.cuda()
        self.ddp_model = DistributedDataParallel(self.model, device_ids=[self.local_rank])
        self.best_path = os.path.join(serialization_dir, "best.th")

    def _load_model_state(self, path):
        self.ddp_model.module.load_state_dict(torch.load(path, map_location="cpu"))

    def finish(self):
        self._load_model_state(self.best_path)
        dist.destroy_process_group()
