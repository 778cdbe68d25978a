"""Two bugs that live in helpers and in rank-local data (`ddp-lint check examples/`):

- `evaluate()` (engine.py) ends in `all_gather_object` (utils/dist.py), but only the main
  process calls it: the other ranks never join that collective, so rank 0 hangs (DDP104);
- a batch whose loss is not finite on *this* rank is skipped with `continue`: the skipped
  `loss.backward()` is DDP's gradient all-reduce, which the other ranks still make (DDP107).
"""
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from engine import evaluate
from utils.dist import is_main_process


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    ds = TensorDataset(torch.randn(1024, 32), torch.randint(0, 4, (1024,)))
    sampler = DistributedSampler(ds)
    loader = DataLoader(ds, batch_size=32, sampler=sampler)
    model = DDP(torch.nn.Linear(32, 4).cuda(), device_ids=[local_rank])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = F.cross_entropy(model(x.cuda()), y.cuda())
            if not torch.isfinite(loss):
                continue
            opt.zero_grad()
            loss.backward()
            opt.step()
        if is_main_process():
            print(evaluate(model.module, loader, local_rank))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
