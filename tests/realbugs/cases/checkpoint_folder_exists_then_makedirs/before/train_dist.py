import os

import torch
import torch.distributed as dist

from vislib.options import parse_args


def run():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    args = parse_args()
    return args


if __name__ == "__main__":
    run()
