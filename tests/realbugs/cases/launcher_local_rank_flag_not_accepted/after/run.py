import os

import torch
import torch.distributed as dist

from mmkit.flags import flags


def main():
    args = flags.get_parser().parse_args()
    dist.init_process_group("nccl", init_method="env://")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    return args


if __name__ == "__main__":
    main()
