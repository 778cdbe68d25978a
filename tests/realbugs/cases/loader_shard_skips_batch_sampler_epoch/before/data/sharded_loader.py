from torch.utils.data import DataLoader


class ShardedLoader(DataLoader):
    def __init__(self, dataset, **kwargs):
        super().__init__(dataset, **kwargs)
        self.iteration = 0

    def set_epoch(self, epoch):
        if self.iteration != epoch:
            self.iteration = epoch
        inner = getattr(self.batch_sampler, "sampler", None)
        if inner is not None and hasattr(inner, "set_epoch"):
            inner.set_epoch(epoch)
        if hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(epoch)
