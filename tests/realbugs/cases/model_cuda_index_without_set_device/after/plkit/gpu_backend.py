import torch

from plkit.core import Module


class GPUBackend:
    def __init__(self, trainer):
        self.trainer = trainer

    def setup(self, model: Module):
        self.trainer.call_setup_hook(model)
        torch.cuda.set_device(self.trainer.root_gpu)
        model.cuda(self.trainer.root_gpu)
        optimizers = model.configure_optimizers()
        self.trainer.optimizers = optimizers
        return model
