# Runs under `ddp-lint run --emulate on` with 2 ranks: what the script sees of the emulated machine.
# Every check is an assert, so a broken emulation shows as a finding at the failing line.
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

if __name__ == "__main__":
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    local_rank = int(os.environ["LOCAL_RANK"])
    assert dist.get_backend() == "nccl" and dist.is_nccl_available()
    assert torch.cuda.is_available() and torch.cuda.device_count() == 2
    assert torch.cuda.current_device() == 0
    torch.cuda.set_device(local_rank)
    assert torch.cuda.current_device() == local_rank
    with torch.cuda.device(1 - local_rank):
        assert torch.cuda.current_device() == 1 - local_rank
    assert torch.cuda.current_device() == local_rank
    assert "emulated" in torch.cuda.get_device_name(local_rank)
    assert torch.cuda.get_device_properties(local_rank).total_memory > 0
    free, total = torch.cuda.mem_get_info()
    assert 0 < free <= total
    torch.cuda.manual_seed_all(0)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()

    # tensors sent to a GPU are CPU tensors that report their emulated device
    x = torch.randn(4, device="cuda")
    assert x.is_cuda and x.device == torch.device("cuda", local_rank) and x.get_device() == local_rank
    y = x * 2 + 1
    assert y.device == x.device
    c = y.cpu()
    assert c.device.type == "cpu" and not c.is_cuda and y.is_cuda
    assert torch.equal(c, y.to("cpu"))
    z = torch.zeros(3).to(local_rank)
    assert z.device.index == local_rank
    w = torch.zeros(3, device=z.device)
    assert w.is_cuda
    assert torch.zeros(3).to(w).is_cuda and not w.to(torch.zeros(1)).is_cuda
    m = nn.Linear(3, 3).to(f"cuda:{local_rank}")
    assert all(p.device == torch.device("cuda", local_rank) for p in m.parameters())
    assert next(nn.Linear(3, 3).cuda().parameters()).is_cuda
    assert not next(m.cpu().parameters()).is_cuda
    p = torch.zeros(3, pin_memory=True).pin_memory().to(local_rank, non_blocking=True)
    assert p.is_cuda
    try:
        y.numpy()
        raise AssertionError("numpy() of a CUDA tensor must fail")
    except TypeError:
        pass
    try:
        torch.zeros(1, device="cuda:7")
        raise AssertionError("cuda:7 must not exist")
    except RuntimeError as e:
        assert "invalid device ordinal" in str(e)
    assert torch.cuda.memory_allocated() > 0
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        pass

    # DDP on the rank's GPU
    model = DDP(nn.Linear(3, 3).to(local_rank), device_ids=[local_rank])
    model(torch.randn(2, 3).to(local_rank)).sum().backward()
    assert next(model.parameters()).grad.is_cuda

    # collectives on the rank's GPU
    t = torch.ones(1, device="cuda")
    dist.all_reduce(t)
    assert t.item() == 2
    dist.barrier()
    objs = [None, None]
    dist.all_gather_object(objs, rank)
    assert objs == [0, 1]
    b = [rank * 10]
    dist.broadcast_object_list(b, src=0)
    assert b == [0]

    # a group with a CPU backend as well: object collectives go through the CPU, so two ranks on
    # one current device are fine there, and so are CPU tensors
    g = dist.new_group(backend="cpu:gloo,cuda:nccl")
    with torch.cuda.device(0):
        dist.all_gather_object(objs, rank, group=g)
    dist.all_reduce(torch.ones(1), group=g)
    print(f"layer ok {rank}", flush=True)
    dist.destroy_process_group()
