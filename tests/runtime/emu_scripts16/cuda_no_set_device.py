"""`.cuda()` without torch.cuda.set_device puts every rank's model on cuda:0; device_ids=[rank] does
not move it, and DDP's constructor broadcasts the parameters where they are: on real NCCL this is
'Duplicate GPU detected'."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("nccl")
rank = dist.get_rank()
model = torch.nn.Linear(4, 1).cuda()
ddp = DDP(model, device_ids=[rank])  # [ddp]
ddp(torch.randn(8, 4)).sum().backward()
dist.destroy_process_group()
