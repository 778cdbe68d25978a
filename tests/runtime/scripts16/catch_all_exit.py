"""A launcher wrapper that turns every error into a log line and exit status 2. Rank 0's tokenizer
file is missing; rank 1's broadcast fails because rank 0 left, and it exits 2 the same way."""
import sys

import torch
import torch.distributed as dist


def run():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if rank == 0:
        open("/nonexistent/tokenizer.json").read()  # [open]
    vocab = torch.zeros(5)
    dist.broadcast(vocab, src=0)  # [bcast]


try:
    run()
except Exception as err:
    print("fatal:", err)
    sys.exit(2)  # [exit]
