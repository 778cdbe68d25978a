from datetime import timedelta

import torch

from core.config import get_settings


def _setup_distributed():
    cfg = get_settings()
    device_count = torch.cuda.device_count()
    if device_count > 0:
        torch.cuda.set_device(cfg.local_rank)
    if cfg.use_engine_launcher:
        import deepspeed
        deepspeed.init_distributed()
    else:
        if not torch.distributed.is_initialized():
            torch.distributed.init_process_group(
                backend=cfg.backend,
                world_size=cfg.world_size, rank=cfg.rank,
                timeout=timedelta(minutes=cfg.timeout_minutes))
