import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

FALLBACK = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def setup(rank, world_size, filename):
    dist.init_process_group("nccl", init_method="file://" + filename, rank=rank, world_size=world_size)


def worker_collect(rank, world_size, ref_rank, filename):
    setup(rank, world_size, filename)
    device = torch.device(rank) if torch.cuda.device_count() > 1 else FALLBACK
    model = torch.nn.Linear(3, 5).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.rand(3, 3, device=device)).sum().backward()
    opt.step()
    state = [None] * world_size
    dist.all_gather_object(state, opt.state_dict())
    dist.destroy_process_group()


def run_collect():
    world_size = 2
    filename = tempfile.mkstemp()[1]
    mp.spawn(worker_collect, args=(world_size, 0, filename), nprocs=world_size, join=True)
