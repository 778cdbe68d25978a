import argparse
import logging
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist


class BoardHook:
    def __init__(self, writer):
        self.writer = writer


def build_hooks(args):
    hooks = []
    out_dir = f"{Path(__file__).parent}/out_{time.strftime('%Y%m%d')}"
    if not args.ckpt_dir:
        args.ckpt_dir = out_dir + "/ckpt"
    if args.board:
        try:
            from torch.utils.tensorboard import SummaryWriter

            writer = SummaryWriter(log_dir=Path(out_dir) / "board")
            hooks.append(BoardHook(writer))
        except ImportError:
            logging.warning("tensorboard missing")
    return hooks


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--board", action="store_true")
    ap.add_argument("--ckpt-dir", dest="ckpt_dir", default="")
    args = ap.parse_args()
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    hooks = build_hooks(args)
    logging.info("%d hooks", len(hooks))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
