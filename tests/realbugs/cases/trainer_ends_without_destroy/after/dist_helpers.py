import os

import torch
import torch.distributed as dist


def setup_process_group(cfg):
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(backend=cfg.backend)
