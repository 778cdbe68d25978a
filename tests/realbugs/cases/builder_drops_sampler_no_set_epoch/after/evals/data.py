import torch
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def init_data(root, batch_size, world_size, rank, training):
    ds = TensorDataset(torch.randn(512, 128), torch.randint(0, 10, (512,)))
    sampler = DistributedSampler(ds, num_replicas=world_size, rank=rank, shuffle=training)
    loader = DataLoader(ds, batch_size=batch_size, sampler=sampler, drop_last=training)
    return loader, sampler
