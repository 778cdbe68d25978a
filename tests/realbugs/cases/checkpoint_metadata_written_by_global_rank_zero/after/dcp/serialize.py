import json
import os

import torch


def write_config(backend, version, ckpt_dir):
    with open(os.path.join(ckpt_dir, "metadata.json"), "w") as fh:
        json.dump({"backend": backend, "version": version}, fh)


def save(state, ckpt_dir, strategy):
    os.makedirs(ckpt_dir, exist_ok=True)
    shard = os.path.join(ckpt_dir, f"shard_{torch.distributed.get_rank()}.pt")
    torch.save(state, shard)

    def finalize():
        if int(os.environ.get("LOCAL_RANK", 0)) == 0:
            write_config(strategy.backend, strategy.version, ckpt_dir)
        torch.distributed.barrier()

    return finalize
