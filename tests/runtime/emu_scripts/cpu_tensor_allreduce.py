# NCCL group, but the tensor never left the CPU: real NCCL raises
# "No backend type associated with device type cpu" at the all_reduce.
import os

import torch
import torch.distributed as dist

if __name__ == "__main__":
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    t = torch.ones(1) * dist.get_rank()
    dist.all_reduce(t)  # [cpu]
    print(t)
    dist.destroy_process_group()
