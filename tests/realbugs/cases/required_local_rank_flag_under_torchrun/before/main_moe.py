import argparse
import os

import torch
import torch.distributed as dist

from config import get_config


def parse_option():
    parser = argparse.ArgumentParser('mixture-of-experts transformer training', add_help=False)
    parser.add_argument('--cfg', type=str, required=True, metavar="FILE", help='path to the config file')
    parser.add_argument('--batch-size', type=int, help="per-GPU batch size")
    parser.add_argument('--data-path', type=str, help='dataset folder')

    # distributed training
    parser.add_argument("--local_rank", type=int, required=True, help='this process\'s GPU on its node')

    args, unparsed = parser.parse_known_args()
    config = get_config(args)
    return args, config


def main(config):
    model = torch.nn.Linear(16, 16)
    model.cuda(config.LOCAL_RANK)
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[config.LOCAL_RANK], broadcast_buffers=False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.TRAIN.BASE_LR)
    for epoch in range(config.TRAIN.EPOCHS):
        loss = model(torch.randn(config.DATA.BATCH_SIZE, 16, device="cuda")).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == '__main__':
    args, config = parse_option()

    if 'RANK' in os.environ and 'WORLD_SIZE' in os.environ:
        rank = int(os.environ["RANK"])
        world_size = int(os.environ['WORLD_SIZE'])
        print(f"rank {rank} of {world_size}")
    else:
        rank = -1
        world_size = -1
    torch.cuda.set_device(config.LOCAL_RANK)
    dist.init_process_group(backend='nccl', init_method='env://', world_size=world_size, rank=rank)
    dist.barrier()

    torch.manual_seed(config.SEED + dist.get_rank())
    main(config)
