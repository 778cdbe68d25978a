"""The global rank used as a device index: fine on one node, `invalid device ordinal` on the second."""
import torch
import torch.distributed as dist

dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(rank)  # [set_device]
t = torch.ones(4, device="cuda")
dist.all_reduce(t)  # [all_reduce]
dist.destroy_process_group()
