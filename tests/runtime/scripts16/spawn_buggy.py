"""Self-spawning: mp.spawn starts 2 ranks; rank 1 raises before the barrier."""
import os

import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = os.environ.get("SPAWN_PORT", "29533")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    if rank == 1:
        raise ValueError("bad shard on rank 1")  # [raise]
    dist.barrier()  # [barrier]
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2)  # [spawn]
