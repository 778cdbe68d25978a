"""An old launch-style script: --local_rank is a required argument (torchrun passes LOCAL_RANK in
the environment instead)."""
import argparse

import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, required=True)
args = parser.parse_args()  # [parse]
dist.init_process_group("gloo")
