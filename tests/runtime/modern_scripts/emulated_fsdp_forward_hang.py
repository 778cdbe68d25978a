"""Under CUDA/NCCL emulation (no GPU): an FSDP2 model on a "cuda" mesh, evaluated on rank 0 only:
rank 0 hangs in the forward's all-gather, rank 1 waits in the barrier."""
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(rank)
mesh = init_device_mesh("cuda", (2,))
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)).cuda()
fully_shard(model, mesh=mesh)
if rank == 0:
    print(model(torch.randn(2, 8, device="cuda")).sum())  # [forward]
dist.barrier()  # [barrier]
