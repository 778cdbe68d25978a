import bisect

from .base import EpochAware


class Joined(EpochAware):
    def __init__(self, parts):
        self.parts = list(parts)
        self.ends = []
        total = 0
        for p in self.parts:
            total += len(p)
            self.ends.append(total)

    def __len__(self):
        return self.ends[-1] if self.ends else 0

    def __getitem__(self, idx):
        k = bisect.bisect_right(self.ends, idx)
        start = self.ends[k - 1] if k else 0
        return self.parts[k][idx - start]
