import logging
import math

import numpy as np

LOG = logging.getLogger(__name__)


def pack_greedy(lengths, capacity):
    bins, current, used = [], [], 0
    for idx, length in enumerate(lengths):
        if used + length > capacity and current:
            bins.append(current)
            current, used = [], 0
        current.append(idx)
        used += length
    if current:
        bins.append(current)
    return bins


def in_groups(items, size):
    for start in range(0, len(items), size):
        yield items[start:start + size]


class PackedLoader:
    """Packs several short samples into each row; one instance per rank."""

    def __init__(self, dataset, collate_fn, seq_len=2048, batch_size=1, sampler=None,
                 efficiency_guess=1.0, world_size=1):
        self.dataset = dataset
        self.lengths = np.array([len(row["input_ids"]) for row in dataset])
        self.collate_fn = collate_fn
        self.seq_len = seq_len
        self.batch_size = batch_size
        self.sampler = sampler
        self.efficiency_guess = efficiency_guess
        self.world_size = world_size

    def generate_batches(self):
        order = list(self.sampler) if self.sampler is not None else list(range(len(self.dataset)))
        bins = pack_greedy(self.lengths[order], self.seq_len)
        return [[order[i] for i in b] for b in bins]

    def __iter__(self):
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(self.sampler.epoch + 1)
        packed = self.generate_batches()
        budget = self._len_est()
        for group in in_groups(packed, self.batch_size):
            rows = []
            for bin_ in group:
                samples = [self.dataset[i] for i in bin_]
                rows.append({key: np.concatenate([np.array(s[key]) for s in samples]) for key in samples[0]})
            yield self.collate_fn(rows)
            budget -= 1
            if not budget:
                return

    def _len_est(self):
        tokens_per_rank = int(np.sum(self.lengths)) // self.world_size
        # a little under the estimate, since random order packs a little differently on each rank
        return math.floor(0.99 * tokens_per_rank / self.efficiency_guess / self.seq_len) // self.batch_size - 1

    def __len__(self):
        return self._len_est()
