import os

import torch
import torch.distributed as dist

from seqtrain.config import DistSection, SeqTrainConfig


def infer_init_method(dcfg: DistSection, force_distributed=False):
    if dcfg.init_method is not None:
        return
    if all(key in os.environ for key in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK")):
        # the processes were started by torchrun / torch.distributed.launch
        _init_from_launcher_env(dcfg)
    elif dcfg.world_size > 1 or force_distributed:
        _init_single_node(dcfg)


def _init_from_launcher_env(dcfg: DistSection):
    dcfg.init_method = "env://"
    dcfg.world_size = int(os.environ["WORLD_SIZE"])
    dcfg.rank = int(os.environ["RANK"])
    dcfg.device_id = int(os.environ["LOCAL_RANK"])
    # the launcher already created one process per GPU
    dcfg.no_spawn = True


def _init_single_node(dcfg: DistSection):
    dcfg.init_method = f"tcp://localhost:{dcfg.port}"
    dcfg.no_spawn = False


def run_worker(device_index, main, cfg: SeqTrainConfig):
    cfg.distributed.device_id = device_index
    if torch.cuda.is_available():
        torch.cuda.set_device(cfg.distributed.device_id)
    dcfg = cfg.distributed
    dist.init_process_group("nccl", init_method=dcfg.init_method, world_size=dcfg.world_size, rank=dcfg.rank)
    try:
        main(cfg)
    finally:
        dist.destroy_process_group()


def call_main(cfg: SeqTrainConfig, main):
    if cfg.distributed.init_method is None:
        infer_init_method(cfg.distributed)
    if cfg.distributed.init_method is not None and cfg.distributed.no_spawn:
        return run_worker(cfg.distributed.device_id, main, cfg)
    return main(cfg)
