import argparse
import os
import shutil

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.utils.data
import torch.utils.data.distributed

parser = argparse.ArgumentParser(description='linear probe on frozen features')
parser.add_argument('--epochs', default=100, type=int)
parser.add_argument('--batch-size', default=256, type=int, help='total batch size over all processes')
parser.add_argument('--world-size', default=-1, type=int, help='number of nodes')
parser.add_argument('--rank', default=-1, type=int, help='node rank')
parser.add_argument('--dist-url', default='tcp://127.0.0.1:23456', type=str)
parser.add_argument('--dist-backend', default='nccl', type=str)
parser.add_argument('--gpu', default=None, type=int)
parser.add_argument('--multiprocessing-distributed', action='store_true',
                    help='start one process per GPU on every node')
parser.add_argument('--out-dir', default='.', type=str)


def main():
    args = parser.parse_args()
    if args.dist_url == "env://" and args.world_size == -1:
        args.world_size = int(os.environ["WORLD_SIZE"])
    args.distributed = args.world_size > 1 or args.multiprocessing_distributed
    gpus_here = torch.cuda.device_count()
    if args.multiprocessing_distributed:
        # one process per GPU: the world grows to nodes * GPUs per node
        args.world_size = gpus_here * args.world_size
        mp.spawn(main_worker, nprocs=gpus_here, args=(gpus_here, args))
    else:
        main_worker(args.gpu, gpus_here, args)


def main_worker(gpu, ngpus_per_node, args):
    args.gpu = gpu
    if args.distributed:
        if args.dist_url == "env://" and args.rank == -1:
            args.rank = int(os.environ["RANK"])
        if args.multiprocessing_distributed:
            # global rank = node rank * GPUs per node + this GPU
            args.rank = args.rank * ngpus_per_node + gpu
        dist.init_process_group(backend=args.dist_backend, init_method=args.dist_url,
                                world_size=args.world_size, rank=args.rank)

    model = torch.nn.Linear(32, 10)
    torch.cuda.set_device(args.gpu)
    model.cuda(args.gpu)
    args.batch_size = int(args.batch_size / args.world_size)
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[args.gpu])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    dataset = torch.utils.data.TensorDataset(torch.randn(4096, 32), torch.randint(0, 10, (4096,)))
    sampler = torch.utils.data.distributed.DistributedSampler(dataset) if args.distributed else None
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, shuffle=(sampler is None),
                                         sampler=sampler, drop_last=True)

    for epoch in range(args.epochs):
        if args.distributed:
            sampler.set_epoch(epoch)
        train(loader, model, optimizer, args)

        if not args.multiprocessing_distributed or (args.multiprocessing_distributed
                and args.rank == 0):  # a single process writes the checkpoint
            save_checkpoint({
                'epoch': epoch + 1,
                'state_dict': model.state_dict(),
                'optimizer': optimizer.state_dict(),
            }, is_best=False, filename='checkpoint.pth.tar')


def train(loader, model, optimizer, args):
    model.train()
    for inputs, labels in loader:
        inputs = inputs.cuda(args.gpu, non_blocking=True)
        labels = labels.cuda(args.gpu, non_blocking=True)
        loss = torch.nn.functional.cross_entropy(model(inputs), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def save_checkpoint(state, is_best, filename='checkpoint.pth.tar'):
    torch.save(state, filename)
    if is_best:
        shutil.copyfile(filename, 'best.pth.tar')


if __name__ == '__main__':
    main()
