import os

import torch

WEIGHTS = "weights"
OPTIM = "optim"


def restore_state(models, optimizers, src_dir):
    for i, m in enumerate(models):
        fname = f"{WEIGHTS}.bin" if i == 0 else f"{WEIGHTS}_{i}.bin"
        path = os.path.join(src_dir, fname)
        models[i].load_state_dict(torch.load(path))
    for i, o in enumerate(optimizers):
        fname = f"{OPTIM}.bin" if i == 0 else f"{OPTIM}_{i}.bin"
        path = os.path.join(src_dir, fname)
        optimizers[i].load_state_dict(torch.load(path))
