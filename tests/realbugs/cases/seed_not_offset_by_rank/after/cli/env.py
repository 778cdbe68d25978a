import random

import numpy as np
import torch


def set_seed(seed):
    if seed == -1:
        seed = random.randint(0, 2**31)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return seed
