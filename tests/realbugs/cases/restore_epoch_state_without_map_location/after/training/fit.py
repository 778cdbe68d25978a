import os
import re

import torch


class Fitter:
    def __init__(self, model, optimizer, out_prefix, gpu=-1):
        self.model = model
        self.optimizer = optimizer
        self.out_prefix = out_prefix
        self.gpu = gpu

    def _resume(self):
        names = [n for n in os.listdir(self.out_prefix) if n.startswith("weights_ep")]
        last = max(int(re.findall(r"\d+", n)[0]) for n in names)
        weights_path = os.path.join(self.out_prefix, "weights_ep{}.th".format(last))
        extra_path = os.path.join(self.out_prefix, "state_ep{}.th".format(last))

        def to_my_device(storage, location):
            if self.gpu >= 0:
                return storage.cuda(self.gpu)
            return storage
        weights = torch.load(weights_path, map_location=to_my_device)
        extra = torch.load(extra_path)
        self.model.load_state_dict(weights)
        self.optimizer.load_state_dict(extra["optim"])
        return extra["epoch"]
