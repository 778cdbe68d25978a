import torch

from .dist_utils import is_master


class Checkpoint:
    def __init__(self, trainer, path):
        self.trainer = trainer
        self.path = path

    def save(self, step):
        if not is_master():
            return
        torch.save({"step": step, "model": self.trainer.model.state_dict()}, self.path + ".last")

    def finalize(self):
        torch.save(self.trainer.model.state_dict(), self.path)
