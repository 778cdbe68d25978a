import os

import torch


class Callback:
    def on_epoch_end(self, trainer):
        pass


class CheckpointCallback(Callback):
    def __init__(self, dirpath, monitor="val_loss", save_top_k=1):
        super().__init__()
        self.monitor = monitor
        self.dirpath = dirpath
        os.makedirs(dirpath, exist_ok=True)
        self.save_top_k = save_top_k
        self.best = None

    def on_epoch_end(self, trainer):
        path = os.path.join(self.dirpath, f"epoch{trainer.epoch}.ckpt")
        torch.save(trainer.model.state_dict(), path)
