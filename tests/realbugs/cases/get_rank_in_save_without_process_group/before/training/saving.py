import logging
from time import time

import torch

log = logging.getLogger(__name__)


def write_checkpoint(step, model, optimizer, path, use_sharded=False):
    t0 = time()
    if not torch.distributed.is_initialized() or use_sharded or torch.distributed.get_rank() == 0:
        state = {"step": step, "model": model.state_dict(), "optim": optimizer.state_dict()}
        log.debug(f"rank: {torch.distributed.get_rank()}, state dict ready in {time() - t0:.2f}s")
        torch.save(state, path)
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
    log.debug(f"rank: {torch.distributed.get_rank()}, save done in {time() - t0:.2f}s")
