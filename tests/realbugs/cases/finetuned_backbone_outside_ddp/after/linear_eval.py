import argparse

import torch
import torch.distributed as dist
import torchvision
from torch import nn, optim


def worker(gpu, args):
    dist.init_process_group("nccl", init_method=args.dist_url, world_size=args.world_size, rank=gpu)
    torch.cuda.set_device(gpu)

    backbone = torchvision.models.resnet50().cuda(gpu)
    backbone.fc = nn.Identity()
    backbone.load_state_dict(torch.load(args.pretrained, map_location="cpu"))
    if args.weights == "freeze":
        backbone.requires_grad_(False)

    head = nn.Linear(2048, 1000).cuda(gpu)
    model = nn.parallel.DistributedDataParallel(nn.Sequential(backbone, head), device_ids=[gpu])

    groups = [dict(params=head.parameters(), lr=args.lr_head)]
    if args.weights == "finetune":
        groups.append(dict(params=backbone.parameters(), lr=args.lr_backbone))
    opt = optim.SGD(groups, 0, momentum=0.9)
    for images, target in args.loader:
        out = model(images.cuda(gpu))
        loss = nn.functional.cross_entropy(out, target.cuda(gpu))
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--weights", default="freeze")
    worker(0, ap.parse_args())
