import os

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler

from seqtrain.data.lines_dataset import JsonLinesDataset


def main(corpus_path):
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dataset = JsonLinesDataset(corpus_path)
    sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, batch_size=4, sampler=sampler)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for _ in loader:
            pass
    dist.destroy_process_group()


if __name__ == "__main__":
    main(os.environ.get("CORPUS", "corpus.jsonl"))
