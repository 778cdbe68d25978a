import os
from collections import OrderedDict

import torch


def _strip(sd):
    return OrderedDict((k[7:] if k.startswith("module.") else k, v) for k, v in sd.items())


def load_weights(model, path, use_ema=False):
    if path and os.path.isfile(path):
        ckpt = torch.load(path)
        key = "ema_state" if use_ema else "state_dict"
        sd = ckpt[key] if isinstance(ckpt, dict) and key in ckpt else ckpt
        model.load_state_dict(_strip(sd))
    else:
        raise FileNotFoundError(path)


def resume(model, path):
    opt_state = None
    start_epoch = None
    if os.path.isfile(path):
        ckpt = torch.load(path)
        if isinstance(ckpt, dict) and "state_dict" in ckpt:
            model.load_state_dict(_strip(ckpt["state_dict"]))
            opt_state = ckpt.get("optimizer")
            start_epoch = ckpt.get("epoch")
        else:
            model.load_state_dict(ckpt)
    return opt_state, start_epoch
