import os

import torch
import torch.distributed as dist

from clip_train.model import ClipModel
from clip_train.train import train_one_epoch


def main(loader, loss_fn):
    dist.init_process_group("nccl")
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    model = ClipModel().cuda(local)
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local])
    opt = torch.optim.AdamW(model.parameters())
    train_one_epoch(model, loader, loss_fn, opt, torch.device("cuda", local))
    dist.destroy_process_group()
