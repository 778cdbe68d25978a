import os

import torch


def cpu_mapping(storage, location):
    return storage


class CkptManager:
    def __init__(self, out_dir=None):
        self.out_dir = out_dir

    def best_state(self):
        if self.out_dir:
            best_path = os.path.join(self.out_dir, "best.th")
            return torch.load(best_path)
        return {}
