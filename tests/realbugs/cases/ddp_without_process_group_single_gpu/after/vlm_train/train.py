import argparse

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from vlm_train.distributed import setup_device


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dist-backend", default="nccl")
    parser.add_argument("--dist-url", default="env://")
    args = parser.parse_args()

    setup_device(args)
    model = torch.nn.Linear(16, 16).cuda()
    device_id = args.rank % torch.cuda.device_count()
    wrapped = DDP(model, device_ids=[device_id])
    opt = torch.optim.AdamW(wrapped.parameters(), lr=1e-4)
    for _ in range(10):
        loss = wrapped(torch.randn(8, 16, device="cuda")).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()


if __name__ == "__main__":
    main()
