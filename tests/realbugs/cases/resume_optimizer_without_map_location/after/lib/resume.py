import os

import torch

WEIGHTS = "weights"
OPTIM = "optim"


def restore_state(models, optimizers, src_dir, map_location=None):
    if map_location is None:
        map_location = "cpu"
    for i, m in enumerate(models):
        fname = f"{WEIGHTS}.bin" if i == 0 else f"{WEIGHTS}_{i}.bin"
        m.load_state_dict(torch.load(os.path.join(src_dir, fname), map_location=map_location))
    for i, o in enumerate(optimizers):
        fname = f"{OPTIM}.bin" if i == 0 else f"{OPTIM}_{i}.bin"
        path = os.path.join(src_dir, fname)
        state = torch.load(path, map_location=map_location)
        optimizers[i].load_state_dict(state)
