import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import TensorDataset
from torch.utils.data.distributed import DistributedSampler
from torch_geometric.loader import DataLoader


def run(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "29512"
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    torch.cuda.set_device(rank)
    graphs = TensorDataset(torch.randn(2048, 32), torch.randn(2048, 1))
    train_loader = DataLoader(graphs, batch_size=128,
                              sampler=DistributedSampler(graphs, num_replicas=world_size, rank=rank))
    model = DistributedDataParallel(torch.nn.Linear(32, 1).to(rank), device_ids=[rank])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(1, 51):
        model.train()
        train_loader.sampler.set_epoch(epoch)
        for x, y in train_loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x.to(rank)), y.to(rank))
            loss.backward()
            optimizer.step()
        if rank == 0:
            print(f"epoch {epoch:03d} loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    n = torch.cuda.device_count()
    mp.spawn(run, args=(n,), nprocs=n, join=True)
