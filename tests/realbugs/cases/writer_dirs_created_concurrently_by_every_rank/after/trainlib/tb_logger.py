import os

import torch
from tensorboardX import SummaryWriter


class BoardLogger:
    def __init__(self, run_dir=None, log_lr=False):
        if run_dir is not None:
            train_dir = os.path.join(run_dir, "board", "train")
            os.makedirs(train_dir, exist_ok=True)
            self._train = SummaryWriter(train_dir)
            valid_dir = os.path.join(run_dir, "board", "valid")
            os.makedirs(valid_dir, exist_ok=True)
            self._valid = SummaryWriter(valid_dir)
        else:
            self._train = self._valid = None
        self.log_lr = log_lr

    def scalar(self, name, value, step):
        if self._train is not None:
            self._train.add_scalar(name, value.item() if torch.is_tensor(value) else value, step)
