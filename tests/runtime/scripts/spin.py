"""Rank 1 spins forever outside any collective; rank 0 waits in barrier()."""
import torch.distributed as dist


def busy():
    n = 0
    while True:  # [loop]
        n += 1  # [spin]


dist.init_process_group("gloo")
if dist.get_rank() == 1:
    busy()  # [call]
dist.barrier()  # [barrier]
