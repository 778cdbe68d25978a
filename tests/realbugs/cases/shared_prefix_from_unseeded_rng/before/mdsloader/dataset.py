import os

import numpy as np
from torch.utils.data import IterableDataset

from mdsloader.locks import FolderBarrier


class ShardReader(IterableDataset):
    def __init__(self, shard_sizes, shuffle_seed=1234, local_leader=True):
        self.shard_sizes = np.array(shard_sizes)
        rng = np.random.default_rng(shuffle_seed)
        self.shuffle_seed = int(rng.integers(1 << 60))
        tag = np.random.randint(1 << 24)
        self._prefix = f"{tag:06x}"
        # every rank on the node must agree on this folder to meet in it
        self._shared_dir = os.path.join(os.path.sep, "tmp", "mdsloader", self._prefix)
        self._barrier = FolderBarrier(os.path.join(self._shared_dir, "barrier.lock"), local_leader)

    def __iter__(self):
        self._barrier.wait()
        for n in self.shard_sizes:
            yield from range(int(n))
