"""No set_device and a `.cuda()` tensor all-reduced before the barrier: that all-reduce runs on
cuda:0 on every rank (the clash), and the barrier would follow it there (the first device this group
used). Static DDP001 names the `.cuda()`; the emulated run stops at the all-reduce."""
import torch
import torch.distributed as dist

dist.init_process_group("nccl")  # [init]
t = torch.ones(2).cuda()
dist.all_reduce(t)  # [reduce]
dist.barrier()
dist.destroy_process_group()
