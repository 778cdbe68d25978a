import os
import random

import numpy as np
import torch
import torch.distributed


def save_checkpoint(tag, epoch, step, model, optimizer, args):
    ckpt_dir = os.path.join(args.save, tag)
    state = {"epoch": epoch, "step": step, "model": model.state_dict(),
             "optimizer": optimizer.state_dict(),
             "rng": (torch.get_rng_state(), np.random.get_state(), random.getstate())}
    if not (torch.distributed.is_initialized() and
            torch.distributed.get_rank() > 0):
        if not os.path.exists(ckpt_dir):
            os.makedirs(ckpt_dir)
        total = args.steps_per_epoch * (epoch - 1) + step
        torch.save(state, os.path.join(ckpt_dir, f"iter_{total:07d}.pt"))
