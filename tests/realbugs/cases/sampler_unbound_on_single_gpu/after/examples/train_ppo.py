import argparse

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main(args):
    prompts = TensorDataset(torch.arange(1000))
    if dist.is_initialized() and dist.get_world_size() > 1:
        prompt_sampler = DistributedSampler(prompts, shuffle=True, seed=42, drop_last=True)
    else:
        prompt_sampler = None
    prompt_loader = DataLoader(prompts, shuffle=(prompt_sampler is None), sampler=prompt_sampler,
                               batch_size=args.batch_size)

    corpus = TensorDataset(torch.arange(5000))
    if dist.is_initialized() and dist.get_world_size() > 1:
        corpus_sampler = DistributedSampler(corpus, shuffle=True, seed=42, drop_last=True)
    else:
        corpus_sampler = None
    corpus_loader = DataLoader(corpus, shuffle=(corpus_sampler is None), sampler=corpus_sampler,
                               batch_size=args.batch_size)

    for (p,), (c,) in zip(prompt_loader, corpus_loader):
        print(p.sum().item(), c.sum().item())


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=8)
    main(parser.parse_args())
