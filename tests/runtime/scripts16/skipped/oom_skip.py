"""The "skip the batch on out-of-memory" pattern: rank 1's step fails once, the handler skips it
with `continue`; rank 1 makes one gradient all-reduce fewer and finishes while rank 0 waits."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
model = DDP(torch.nn.Linear(3, 1))


def train_step(i):
    if rank == 1 and i == 1:
        raise MemoryError("simulated: no room for the activations")
    model(torch.ones(2, 3)).sum().backward()  # [bwd]


for i in range(3):
    try:
        train_step(i)  # [call]
    except MemoryError:
        print("skipping batch", i)
        continue  # [skip]
    print("step", i)
print("end", rank)
