r"""
Turn a folder of training checkpoints into one packaged model file.

Run it with one process per model-parallel rank:
    python -m torch.distributed.launch --nproc_per_node=<tp * pp> tools/ckpt_convert.py \
        --ckpt_dir <folder> --out <file> --tp_size <tp> --pp_size <pp>
"""

import os
from argparse import ArgumentParser

import torch

from ckptkit.dist_init import initialize_distributed


def get_args():
    parser = ArgumentParser()
    parser.add_argument("--ckpt_dir", type=str, required=True)
    parser.add_argument("--out", type=str, required=True)
    parser.add_argument("--tp_size", type=int, required=True)
    parser.add_argument("--pp_size", type=int, required=True)
    parser.add_argument("--local_rank", type=int, required=False, default=os.getenv("LOCAL_RANK", -1))
    parser.add_argument("--precision", type=str, default="16-mixed", choices=["32-true", "16-mixed", "bf16-mixed"])
    args = parser.parse_args()
    return args


def convert(local_rank, rank, world_size, args):
    shard = torch.load(os.path.join(args.ckpt_dir, f"rank_{rank:02d}.pt"), map_location="cpu")
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
    if rank == 0:
        torch.save(shard, args.out)


if __name__ == "__main__":
    args = get_args()
    local_rank, rank, world_size = initialize_distributed(args)
    convert(local_rank, rank, world_size, args)
