"""A training job that goes wrong in one of four ways (argv[1]); every rank dumps its Flight
Recorder buffer on demand (as the watchdog would on a timeout) into argv[2]."""
import os
import sys
import threading
import time

import torch
import torch.distributed as dist

import helpers

scenario, out = sys.argv[1], sys.argv[2]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo", init_method=os.environ.get("FR_INIT", "env://"), rank=rank, world_size=world)


def dump():
    data = torch._C._distributed_c10d._dump_fr_trace()
    tmp = os.path.join(out, f".rank{rank}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, os.path.join(out, f"trace_rank_{rank}"))


def peer_dumped(r):
    return os.path.join(out, f"trace_rank_{r}")


def dump_and_leave(after=0.0):
    time.sleep(after)
    dump()
    deadline = time.time() + 20
    while time.time() < deadline and not all(os.path.exists(peer_dumped(r)) or r == rank for r in range(world)):
        time.sleep(0.05)
    os._exit(0)


x = torch.ones(8)
helpers.average(x)  # collective #1, every rank

if scenario == "mismatch":
    # the same bytes (gloo would abort on a size clash before the dump), a different shape
    t = torch.ones(4) if rank == 0 else torch.ones(2, 2)
    work = dist.all_reduce(t, async_op=True)
    dump_and_leave()
elif scenario == "skip":
    if rank == 0:
        dist.all_reduce(torch.ones(3), async_op=True)
    dist.broadcast(torch.ones(2), src=0, async_op=True)
    dump_and_leave()
elif scenario == "exit":
    if rank == 1:
        while not os.path.exists(peer_dumped(0)):
            time.sleep(0.05)
        sys.exit(3)
    dist.all_reduce(torch.ones(6), async_op=True)
    dump()
    time.sleep(30)
elif scenario == "hang":
    if rank == 1:
        helpers.slow_io(peer_dumped(0))
        dump_and_leave()
    threading.Thread(target=dump_and_leave, args=(1.0,), daemon=True).start()
    helpers.average(torch.ones(7))
    time.sleep(30)
