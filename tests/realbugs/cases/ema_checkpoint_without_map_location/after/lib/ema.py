from collections import OrderedDict
from copy import deepcopy

import torch


class EmaCopy:
    def __init__(self, model, decay=0.999, resume=""):
        self.shadow = deepcopy(model)
        self.decay = decay
        if resume:
            self._restore(resume)
        for p in self.shadow.parameters():
            p.requires_grad_(False)

    def _restore(self, path):
        ckpt = torch.load(path, map_location="cpu")
        assert isinstance(ckpt, dict)
        if "ema_state" in ckpt:
            clean = OrderedDict((k[7:] if k.startswith("module") else k, v) for k, v in ckpt["ema_state"].items())
            self.shadow.load_state_dict(clean)
