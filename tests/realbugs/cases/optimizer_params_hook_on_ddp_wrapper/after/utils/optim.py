from torch import nn


def param_groups(model, cfg):
    groups = model.parameters()
    if hasattr(model, "param_groups_for"):
        groups = model.param_groups_for(cfg)
    wrapped = (isinstance(model, nn.DataParallel) or
               isinstance(model, nn.parallel.DistributedDataParallel))
    if wrapped and hasattr(model.module, "param_groups_for"):
        groups = model.module.param_groups_for(cfg)
    return groups
