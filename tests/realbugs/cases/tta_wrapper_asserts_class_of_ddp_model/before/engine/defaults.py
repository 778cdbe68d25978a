import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from modeling.tta import TwoStageDetector
from .loop import PlainTrainer


__all__ = ["StandardTrainer"]


class StandardTrainer(PlainTrainer):
    def __init__(self, cfg):
        model = TwoStageDetector().cuda()
        optimizer = build_optimizer(model)
        loader = build_loader(cfg)
        if dist.is_initialized() and dist.get_world_size() > 1:
            model = DistributedDataParallel(model, device_ids=[dist.get_rank() % 8])
        super().__init__(model, loader, optimizer)
        self.cfg = cfg

    @classmethod
    def evaluate(cls, cfg, model):
        return {"ap": 0.0}


def build_optimizer(model):
    import torch
    return torch.optim.SGD(model.parameters(), lr=0.1)


def build_loader(cfg):
    return []
