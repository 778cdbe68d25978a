"""Run as ``-m trainer.main`` from tests/runtime/scripts16/mpkg: the relative import needs the package."""
import torch.distributed as dist

from .util import check

dist.init_process_group("gloo")
check(dist.get_rank())  # [call]
dist.barrier()  # [barrier]
dist.destroy_process_group()
