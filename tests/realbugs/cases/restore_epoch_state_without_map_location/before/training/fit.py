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
        weights = torch.load(os.path.join(self.out_prefix, "weights_ep{}.th".format(last)))
        extra = torch.load(os.path.join(self.out_prefix, "state_ep{}.th".format(last)))
        self.model.load_state_dict(weights)
        self.optimizer.load_state_dict(extra["optim"])
        return extra["epoch"]
