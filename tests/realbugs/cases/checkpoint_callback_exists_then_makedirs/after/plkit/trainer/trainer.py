import torch.distributed as dist

from plkit.trainer.setup_mixin import CallbackSetupMixin


class Trainer(CallbackSetupMixin):
    def __init__(self, save_root=".", checkpoint_callback=True, distributed=False):
        self.save_root = save_root
        self.checkpoint_callback = checkpoint_callback
        self.distributed = distributed
        self.weights_dir = None

    def pretrain_routine(self, model):
        model.trainer = self
        if self.distributed:
            dist.barrier()
        self.configure_callbacks()
        self.model = model
