from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


class LoaderMixin:
    world_size = 1
    global_rank = 0
    swap_sampler = True

    def prepare_loader(self, loader, train):
        if self.swap_sampler and self.world_size > 1:
            sampler = self._make_dist_sampler(loader)
            loader = self._rebuild(loader, sampler)
        return loader

    def _rebuild(self, loader, sampler):
        return DataLoader(loader.dataset, batch_size=loader.batch_size,
                          num_workers=loader.num_workers, sampler=sampler)

    def _make_dist_sampler(self, loader):
        opts = dict(num_replicas=self.world_size, rank=self.global_rank)
        return DistributedSampler(loader.dataset, **opts)

    def val_loader(self, loader):
        return self.prepare_loader(loader, train=False)
