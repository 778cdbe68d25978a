import os

import torch

from textkit.dist import is_main, sync
from textkit import vectors


def _cache_dir(cache):
    if cache is None or not os.path.exists(cache):
        cache = os.path.join(os.path.expanduser("~"), ".textkit_cache")
    return cache


class SharedVocab:
    def __init__(self, words, embedding_name, cache=None):
        cache = _cache_dir(cache)
        table = vectors.load(embedding_name, cache=cache)
        self.vectors = torch.stack([table[w] for w in words])


class PretrainedVocab:
    def __init__(self, embedding_name, cache=None):
        cache = _cache_dir(cache)
        table = vectors.load(embedding_name, cache=cache)
        self.itos = list(table)
        self.vectors = torch.stack([table[w] for w in self.itos])
