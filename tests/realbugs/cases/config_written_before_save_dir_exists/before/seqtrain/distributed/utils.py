import os

import torch
import torch.distributed as dist


def global_rank():
    return dist.get_rank() if dist.is_initialized() else 0


def is_master(dcfg):
    return dcfg.rank == 0


def launch(cfg, main_fn):
    if "RANK" in os.environ:
        cfg.distributed.rank = int(os.environ["RANK"])
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group("nccl")
        try:
            main_fn(cfg)
        finally:
            dist.destroy_process_group()
    else:
        main_fn(cfg)
