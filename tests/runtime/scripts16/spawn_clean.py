"""Self-spawning and correct: mp.spawn starts 2 ranks that train a DDP model and finish (DDP under
TORCH_DISTRIBUTED_DEBUG=DETAIL needs the shim's workaround in every child)."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP


def worker(rank, world):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = os.environ.get("SPAWN_PORT", "29534")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(4, 1))
    for _ in range(2):
        model(torch.randn(8, 4)).sum().backward()
    print("TRAINED", rank, flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2)
