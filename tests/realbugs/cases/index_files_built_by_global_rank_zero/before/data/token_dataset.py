import os

import numpy as np
import torch


def build_indices(prefix, n_docs, seed):
    doc_file = prefix + "_doc_idx.npy"
    shuf_file = prefix + "_shuffle_idx.npy"
    if torch.distributed.get_rank() == 0:
        if not os.path.isfile(doc_file) or not os.path.isfile(shuf_file):
            rng = np.random.RandomState(seed)
            np.save(doc_file, np.arange(n_docs), allow_pickle=True)
            np.save(shuf_file, rng.permutation(n_docs), allow_pickle=True)
    counts = torch.cuda.LongTensor([1])
    torch.distributed.all_reduce(counts)
    doc_idx = np.load(doc_file, allow_pickle=True, mmap_mode="r")
    shuf_idx = np.load(shuf_file, allow_pickle=True, mmap_mode="r")
    return doc_idx, shuf_idx
