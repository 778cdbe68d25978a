"""Self-spawning, correct, and slow to start (a loaded machine, a large import): each rank spends
SLOW_START seconds before init_process_group. That is start-up, not a hang."""
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world):
    time.sleep(float(os.environ.get("SLOW_START", "0")))
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = os.environ.get("SPAWN_PORT", "29533")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    t = torch.ones(2)
    dist.all_reduce(t)
    print("REDUCED", rank, float(t[0]), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2)
