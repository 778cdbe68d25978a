import json
import os

import torch.distributed as dist

from evalkit.remote import fetch_file


def build_loader(path, category=None):
    with open(path) as fh:
        rows = [json.loads(line) for line in fh]
    if category is not None:
        rows = [r for r in rows if r.get("category") == category]
    return rows


def task_loaders(remote, local_path, split_by_category=False):
    if dist.get_rank() == 0:
        fetch_file(remote, local_path)
    dist.barrier()
    if split_by_category:
        with open(local_path) as fh:
            cats = sorted({json.loads(line)["category"] for line in fh})
        loaders = {}
        for cat in cats:
            loaders[cat] = build_loader(local_path, cat)
        os.remove(local_path)
        return loaders
    return build_loader(local_path)
