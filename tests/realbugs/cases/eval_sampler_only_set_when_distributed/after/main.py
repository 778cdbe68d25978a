import argparse

import torch
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler, SequentialSampler, TensorDataset

import utils


def get_args():
    parser = argparse.ArgumentParser("classifier training")
    parser.add_argument("--batch-size", default=16, type=int)
    parser.add_argument("--workers", default=2, type=int)
    return parser.parse_args()


def make_split(n):
    return TensorDataset(torch.randn(n, 8), torch.randint(0, 3, (n,)))


def main(args):
    utils.setup_distributed(args)
    train_set = make_split(512)
    val_set = make_split(128)

    if True:  # args.distributed:
        replicas = utils.world_size()
        my_rank = utils.rank()
        train_sampler = DistributedSampler(train_set, num_replicas=replicas, rank=my_rank, shuffle=True)
        val_sampler = DistributedSampler(val_set, num_replicas=replicas, rank=my_rank, shuffle=False)
    else:
        train_sampler = RandomSampler(train_set)
        val_sampler = SequentialSampler(val_set)

    train_loader = DataLoader(
        train_set, sampler=train_sampler,
        batch_size=args.batch_size, num_workers=args.workers, drop_last=True,
    )
    val_loader = DataLoader(
        val_set, sampler=val_sampler,
        batch_size=2 * args.batch_size,
        num_workers=args.workers,
        drop_last=False
    )
    for epoch in range(2):
        train_sampler.set_epoch(epoch)
        for _ in train_loader:
            pass
        for _ in val_loader:
            pass
    utils.teardown_distributed(args)


if __name__ == "__main__":
    main(get_args())
