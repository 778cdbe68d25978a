import os

import torch
import torch.distributed as dist

from conf.options import DistOptions, TrainOptions


def infer_init_method(dcfg: DistOptions):
    if all(k in os.environ for k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")):
        _init_from_launcher_env(dcfg)
    elif "SLURM_PROCID" in os.environ:
        _init_from_slurm(dcfg)


def _init_from_launcher_env(dcfg: DistOptions):
    dcfg.init_method = "env://"
    dcfg.world_size = int(os.environ["WORLD_SIZE"])
    dcfg.rank = int(os.environ["RANK"])
    dcfg.no_spawn = True


def _init_from_slurm(dcfg: DistOptions):
    dcfg.init_method = "env://"
    dcfg.rank = int(os.environ["SLURM_PROCID"])
    dcfg.device_id = int(os.environ["SLURM_LOCALID"])
    dcfg.no_spawn = True


def run_worker(index, main, cfg: TrainOptions):
    cfg.distributed.device_id = index
    if torch.cuda.is_available() and not cfg.cpu:
        torch.cuda.set_device(cfg.distributed.device_id)
    dist.init_process_group(cfg.distributed.backend, init_method=cfg.distributed.init_method,
                            world_size=cfg.distributed.world_size, rank=cfg.distributed.rank)
    main(cfg)


def call_main(cfg: TrainOptions, main):
    infer_init_method(cfg.distributed)
    if cfg.distributed.no_spawn:
        return run_worker(cfg.distributed.device_id, main, cfg)
    return main(cfg)
