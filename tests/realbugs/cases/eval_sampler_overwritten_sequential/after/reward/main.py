import argparse

import deepspeed
import torch
from torch.utils.data import DataLoader, RandomSampler, SequentialSampler, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=-1)
    parser.add_argument("--batch_size", type=int, default=4)
    args = parser.parse_args()
    if args.local_rank != -1:
        torch.cuda.set_device(args.local_rank)
        deepspeed.init_distributed()

    train_set = TensorDataset(torch.randn(512, 8))
    eval_set = TensorDataset(torch.randn(128, 8))
    if args.local_rank == -1:
        train_sampler = RandomSampler(train_set)
        eval_sampler = SequentialSampler(eval_set)
    else:
        train_sampler = DistributedSampler(train_set)
        eval_sampler = DistributedSampler(eval_set)
    train_loader = DataLoader(train_set, sampler=train_sampler, batch_size=args.batch_size)
    eval_loader = DataLoader(eval_set, sampler=eval_sampler, batch_size=args.batch_size)

    for (x,) in train_loader:
        pass
    total = sum(float(x.sum()) for (x,) in eval_loader)
    print(total)


if __name__ == "__main__":
    main()
