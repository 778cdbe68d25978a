import random

from torch.utils.data import Dataset


class RandomMaskDataset(Dataset):
    def __init__(self, seqs, mask_id, prob=0.15, seed=1):
        self.seqs = seqs
        self.mask_id = mask_id
        self.prob = prob
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch, **unused):
        self.epoch = epoch

    def __len__(self):
        return len(self.seqs)

    def __getitem__(self, index):
        rng = random.Random((self.seed, self.epoch, index).__hash__())
        return [self.mask_id if rng.random() < self.prob else t for t in self.seqs[index]]
