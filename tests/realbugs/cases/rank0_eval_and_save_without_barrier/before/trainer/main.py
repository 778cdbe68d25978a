import os

import torch
import torch.distributed as dist


def on_master(args):
    return args.rank == 0


def evaluate(model, loaders, epoch, args):
    if not on_master(args):
        return {}
    model.eval()
    with torch.no_grad():
        total = sum(model(x).sum().item() for x in loaders["val"])
    return {"epoch": epoch, "score": total}


def main(args, model, loaders, train_one_epoch):
    for epoch in range(args.epochs):
        train_one_epoch(model, loaders["train"], epoch, args)
        done = epoch + 1
        if "val" in loaders:
            evaluate(model, loaders, done, args)
        if args.save_dir and on_master(args):
            tmp = os.path.join(args.save_dir, "tmp.pt")
            torch.save({"epoch": done, "state_dict": model.state_dict()}, tmp)
            os.replace(tmp, os.path.join(args.save_dir, "latest.pt"))
    if args.distributed:
        dist.destroy_process_group()
