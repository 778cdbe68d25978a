"""What the round-2 rules claim about torch, observed on 2 CPU ranks (Gloo): prints one JSON line.

Run by tests/runtime/test_round2_claims.py; MASTER_PORT comes from the test.
"""
import json
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 1)
        self.aux = nn.Linear(4, 2)  # never used by forward (DDP209)

    def forward(self, x):
        return self.body(x)


def same_grads(m) -> bool:
    g = m.module.weight.grad.clone()
    out = [torch.zeros_like(g) for _ in range(dist.get_world_size())]
    dist.all_gather(out, g)
    return bool(torch.allclose(out[0], out[1]))


def worker(rank, world_size, q):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    res = {}
    try:
        dist.all_reduce(1.5)  # DDP111
    except TypeError as e:
        res["DDP111"] = " ".join(str(e).split())
    if rank == 1:  # DDP101: the non-destination rank raises before communicating
        try:
            dist.gather(torch.ones(2), [torch.zeros(2), torch.zeros(2)], dst=0)
        except ValueError as e:
            res["DDP101"] = str(e)
    torch.manual_seed(0)
    m = DDP(nn.Linear(4, 1))
    x = torch.randn(3, 4) + rank  # different data on each rank
    m.module(x).sum().backward()  # DDP207
    res["DDP207_synced"] = same_grads(m)
    m.zero_grad()
    out = m(x)
    with m.no_sync():  # DDP208: the forward ran outside
        out.sum().backward()
    res["DDP208_synced"] = same_grads(m)
    m.zero_grad()
    with m.no_sync():
        m(x).sum().backward()
    res["no_sync_synced"] = same_grads(m)
    u = DDP(Net())
    try:
        for _ in range(2):
            u(torch.randn(3, 4)).sum().backward()
    except RuntimeError as e:
        res["DDP209"] = " ".join(str(e).split())
    dist.destroy_process_group()
    q.put((rank, res))


if __name__ == "__main__":
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    mp.spawn(worker, args=(2, q), nprocs=2)
    got = dict(q.get() for _ in range(2))
    print(json.dumps({str(k): v for k, v in got.items()}))
