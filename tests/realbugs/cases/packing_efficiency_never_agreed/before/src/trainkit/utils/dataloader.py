import numpy as np


class PackedLoader:
    def __init__(self, dataset, collate_fn, seq_len=2048, batch_size=1, sampler=None, world_size=1):
        self.dataset = dataset
        self.collate_fn = collate_fn
        self.seq_len = seq_len
        self.batch_size = batch_size
        self.sampler = sampler
        self.world_size = world_size
        self.used = 0
        self.slots = 0

    def _bins(self):
        order = list(self.sampler) if self.sampler is not None else list(range(len(self.dataset)))
        bins, current, used = [], [], 0
        for idx in order:
            length = len(self.dataset[idx]["input_ids"])
            if used + length > self.seq_len and current:
                bins.append(current)
                self.used += used
                self.slots += self.seq_len
                current, used = [], 0
            current.append(idx)
            used += length
        return bins

    def measured_len(self):
        return len(self._bins()) // self.batch_size

    def efficiency(self):
        return self.used / max(self.slots, 1)
