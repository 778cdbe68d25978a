import torch
from torch.nn.parallel import DistributedDataParallel


class LoopTrainer:
    def __init__(self, model, optimizer, loader, cuda_device=-1, distributed=False):
        self.model = model
        self.optimizer = optimizer
        self.loader = loader
        self.gpu_index = cuda_device
        self._distributed = distributed
        if self._distributed:
            self._net = DistributedDataParallel(
                self.model, device_ids=[self.gpu_index], find_unused_parameters=True
            )
        else:
            self._net = self.model

    def train_epoch(self):
        self._net.train()
        for batch in self.loader:
            self.optimizer.zero_grad()
            out = self._net(**batch)
            out["loss"].backward()
            self.optimizer.step()
