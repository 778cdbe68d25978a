import argparse
import logging
import os

import torch
import torch.distributed as dist

try:
    import wandb
    has_wandb = True
except ImportError:
    has_wandb = False

_log = logging.getLogger("train")


def parse():
    ap = argparse.ArgumentParser()
    ap.add_argument("--experiment", default="demo")
    ap.add_argument("--log-wandb", action="store_true")
    return ap.parse_args()


def main():
    args = parse()

    if args.log_wandb:
        if has_wandb:
            wandb.init(project=args.experiment, config=vars(args))
        else:
            _log.warning("wandb requested but not installed")

    args.distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    args.rank = 0
    if args.distributed:
        dist.init_process_group("nccl")
        args.rank = dist.get_rank()
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))

    model = torch.nn.Linear(8, 2).cuda()
    return model


if __name__ == "__main__":
    main()
