import os

import torch
from torch.utils import model_zoo

ZOO_URLS = {"resnet50_extra": "https://example.org/weights/resnet50_extra.pth"}


def load_weights(model, filename, map_location=None, strict=False):
    if filename.startswith("zoo://"):
        name = filename[6:]
        state = model_zoo.load_url(ZOO_URLS[name])
    elif filename.startswith(("http://", "https://")):
        state = model_zoo.load_url(filename)
    else:
        if not os.path.isfile(filename):
            raise IOError(f"{filename} is not a checkpoint file")
        state = torch.load(filename, map_location=map_location)
    if "state_dict" in state:
        state = state["state_dict"]
    model.load_state_dict(state, strict=strict)
    return state
