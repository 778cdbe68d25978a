import argparse
import os

import torch
import torch.distributed as dist
import torchvision


def main(args):
    dist.init_process_group("nccl")
    gpu = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(gpu)
    dataset = torchvision.datasets.FakeData(size=256, transform=torchvision.transforms.ToTensor())
    sampler = torch.utils.data.distributed.DistributedSampler(dataset, shuffle=True)
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)
    model = torch.nn.parallel.DistributedDataParallel(torchvision.models.vit_b_16(image_size=32).cuda(gpu), device_ids=[gpu])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(args.epochs):
        # sampler.set_epoch(epoch)
        for step, (x, _) in enumerate(loader, start=epoch * len(loader)):
            x = x.cuda(gpu, non_blocking=True)
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", dest="batch_size", type=int, default=32)
    main(ap.parse_args())
