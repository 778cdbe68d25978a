"""--local_rank defaults to 0 and torchrun does not pass it: every rank sets cuda:0."""
import argparse

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=0)
args = parser.parse_args()
torch.cuda.set_device(args.local_rank)
dist.init_process_group("nccl")
t = torch.ones(2, device="cuda")
dist.all_reduce(t)  # [reduce]
dist.destroy_process_group()
