import argparse

import torch
from torch.nn.parallel import DistributedDataParallel

import utils
from supernet import ElasticBlocks


def get_args():
    parser = argparse.ArgumentParser("elastic depth search training")
    parser.add_argument("--epochs", default=3, type=int)
    parser.add_argument("--search", action="store_true")
    parser.add_argument("--depths", default="2,4,6")
    return parser.parse_args()


def main(args):
    utils.setup_distributed(args)
    device = torch.device("cuda")
    model = ElasticBlocks()
    model.to(device)

    bare_model = model
    if args.distributed:
        model = DistributedDataParallel(model, device_ids=[args.gpu], find_unused_parameters=True)
        bare_model = model.module
    if args.search:
        choices = [int(d) for d in args.depths.split(",")]
        bare_model.pick_depth(choices)
        bare_model.sample_depth()

    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(args.epochs):
        if args.search:
            bare_model.sample_depth()
        x = torch.randn(32, 64, device=device)
        y = torch.randint(0, 10, (32,), device=device)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    utils.teardown_distributed(args)


if __name__ == "__main__":
    main(get_args())
