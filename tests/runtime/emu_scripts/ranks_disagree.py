# Each rank pinned to its own GPU, but the ranks call different collectives: the emulation's device
# exchange must not add a deadlock; the real mismatch is reported (DDP902).
import os

import torch
import torch.distributed as dist

if __name__ == "__main__":
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    out = [None, None]
    if rank == 0:
        dist.all_gather_object(out, rank)  # [gather]
    else:
        dist.barrier()  # [barrier]
    print("after", rank)
