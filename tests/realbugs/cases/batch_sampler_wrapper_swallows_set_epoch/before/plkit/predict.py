import torch
from torch.utils.data import BatchSampler, DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from plkit.overrides import IndexRecordingBatchSampler


def predict(model, epochs=2):
    ds = TensorDataset(torch.randn(64, 4))
    batches = BatchSampler(DistributedSampler(ds, shuffle=True), batch_size=8, drop_last=False)
    wrapper = IndexRecordingBatchSampler(batches)
    loader = DataLoader(ds, batch_sampler=wrapper)
    outs = []
    for epoch in range(epochs):
        if hasattr(loader.batch_sampler, "set_epoch"):
            loader.batch_sampler.set_epoch(epoch)
        for (x,) in loader:
            outs.append(model(x))
    return outs
