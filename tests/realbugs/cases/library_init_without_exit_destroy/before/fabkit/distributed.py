import logging
import os
from typing import Any, Optional

import torch
import torch.distributed

log = logging.getLogger(__name__)


def init_connection(env, backend: str, global_rank: Optional[int] = None,
                    world_size: Optional[int] = None, **kwargs: Any) -> None:
    """Set the rendezvous variables and initialise the default process group."""
    if not torch.distributed.is_available():
        raise RuntimeError("torch.distributed is not available")
    if torch.distributed.is_initialized():
        log.debug("already initialised")
        return
    global_rank = global_rank if global_rank is not None else env.global_rank()
    world_size = world_size if world_size is not None else env.world_size()
    os.environ["MASTER_ADDR"] = env.main_address
    os.environ["MASTER_PORT"] = str(env.main_port)
    torch.distributed.init_process_group(backend, rank=global_rank, world_size=world_size, **kwargs)

    if global_rank == 0:
        log.info("initialised %d processes", world_size)


def default_backend(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"
