import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel


@torch.no_grad()
def evaluate(batches, model, rank):
    model.eval()
    correct = seen = 0
    for x, y in batches:
        pred = model(x.to(rank)).argmax(dim=-1)
        correct += int((pred == y.to(rank)).sum())
        seen += y.numel()
    return torch.tensor(correct / seen, device=rank)


def run(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "29511"
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    torch.cuda.set_device(rank)
    torch.manual_seed(rank)
    train = [(torch.randn(32, 16), torch.randint(0, 4, (32,))) for _ in range(10)]
    val = [(torch.randn(32, 16), torch.randint(0, 4, (32,))) for _ in range(3)]
    test = [(torch.randn(32, 16), torch.randint(0, 4, (32,))) for _ in range(3)]

    model = DistributedDataParallel(torch.nn.Linear(16, 4).to(rank), device_ids=[rank])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(1, 11):
        model.train()
        for x, y in train:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x.to(rank)), y.to(rank))
            loss.backward()
            optimizer.step()
        if epoch % 5 == 0:
            train_acc = evaluate(train, model, rank)
            val_acc = evaluate(val, model, rank)
            test_acc = evaluate(test, model, rank)
            if world_size > 1:
                dist.all_reduce(train_acc, op=dist.ReduceOp.SUM)
                dist.all_reduce(train_acc, op=dist.ReduceOp.SUM)
                dist.all_reduce(train_acc, op=dist.ReduceOp.SUM)
                train_acc /= world_size
                val_acc /= world_size
                test_acc /= world_size
            if rank == 0:
                print(f"train {train_acc:.4f} val {val_acc:.4f} test {test_acc:.4f}")
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    n = torch.cuda.device_count()
    mp.spawn(run, args=(n,), nprocs=n, join=True)
