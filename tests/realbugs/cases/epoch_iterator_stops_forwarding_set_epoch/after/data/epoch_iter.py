import torch


class EpochBatchIter:
    def __init__(self, dataset, batch_sampler, seed=1, num_shards=1, shard_id=0, epoch=0):
        self.dataset = dataset
        self.batch_sampler = batch_sampler
        self.seed = seed
        self.num_shards = num_shards
        self.shard_id = shard_id
        self.epoch = epoch
        self._cur = None
        self._next = None

    def next_epoch_itr(self, shuffle=True):
        if self._next is not None:
            self._cur = self._next
            self._next = None
        else:
            self.epoch += 1
            self._cur = self._iter_for(self.epoch, shuffle)
        self.dataset.set_epoch(self.epoch)
        return self._cur

    def _iter_for(self, epoch, shuffle):
        import random
        batches = list(self.batch_sampler)
        if shuffle:
            random.Random(self.seed + epoch).shuffle(batches)
        mine = batches[self.shard_id::self.num_shards]
        return iter(torch.utils.data.DataLoader(self.dataset, batch_sampler=mine))
