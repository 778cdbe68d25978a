from .base import EpochAware


class Paired(EpochAware):
    def __init__(self, *parts):
        self.parts = parts

    def __len__(self):
        return len(self.parts[0])

    def __getitem__(self, idx):
        return tuple(p[idx] for p in self.parts)

    def set_epoch(self, epoch):
        super().set_epoch(epoch)
        for p in self.parts:
            if hasattr(p, "set_epoch"):
                p.set_epoch(epoch)
