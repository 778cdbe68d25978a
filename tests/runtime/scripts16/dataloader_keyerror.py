"""A DataLoader worker raises KeyError in the dataset's __getitem__ on rank 1."""
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset


class Table(Dataset):
    def __init__(self, rank):
        self.rows = {i: torch.ones(2) for i in range(8)}
        self.rank = rank

    def __len__(self):
        return 8

    def __getitem__(self, i):
        key = i + 5 if self.rank == 1 else i
        return self.rows[key]  # [getitem]


dist.init_process_group("gloo")
rank = dist.get_rank()
loader = DataLoader(Table(rank), batch_size=2, num_workers=1)
for batch in loader:  # [loop]
    dist.all_reduce(batch)  # [reduce]
dist.destroy_process_group()
