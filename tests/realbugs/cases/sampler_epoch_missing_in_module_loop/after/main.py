import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--world-size", type=int, default=1)
parser.add_argument("--rank", type=int, default=0)
parser.add_argument("--backend", default="nccl")
parser.add_argument("--init-url", default="env://")
args = parser.parse_args()
use_dist = args.world_size > 1
if use_dist:
    torch.cuda.set_device(args.rank % torch.cuda.device_count())
    dist.init_process_group(args.backend, init_method=args.init_url,
                            world_size=args.world_size, rank=args.rank)

data = TensorDataset(torch.randn(512, 10), torch.randint(0, 2, (512,)))
if use_dist:
    sampler = DistributedSampler(data)
else:
    sampler = None
loader = DataLoader(data, sampler=sampler, batch_size=32, shuffle=(sampler is None))
net = torch.nn.Linear(10, 2).cuda()
if use_dist:
    net = torch.nn.parallel.DistributedDataParallel(net)
opt = torch.optim.SGD(net.parameters(), lr=0.01)


def train(epoch):
    net.train()
    for x, y in loader:
        opt.zero_grad()
        F.cross_entropy(net(x.cuda()), y.cuda()).backward()
        opt.step()


for epoch in range(1, args.epochs + 1):
    if sampler is not None:
        sampler.set_epoch(epoch)
    train(epoch)
