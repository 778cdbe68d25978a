import importlib

import torch
import torch.distributed as dist


def build_by_name(class_name, **kwargs):
    module_name, _, attr = class_name.rpartition(".")
    return getattr(importlib.import_module(module_name), attr)(**kwargs)


def run_training(net_kwargs, opt_kwargs, total_steps=1000, device=torch.device("cuda")):
    net = build_by_name(**net_kwargs).train().requires_grad_(True).to(device)
    opt = build_by_name(params=net.parameters(), **opt_kwargs)
    wrapped = torch.nn.parallel.DistributedDataParallel(net, device_ids=[device])
    for step in range(total_steps):
        opt.zero_grad(set_to_none=True)
        x = torch.randn(8, 3, 32, 32, device=device)
        loss = wrapped(x).square().mean()
        loss.backward()
        opt.step()
    if dist.get_rank() == 0:
        torch.save(net.state_dict(), "final.pt")
