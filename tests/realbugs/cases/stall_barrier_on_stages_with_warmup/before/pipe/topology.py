import torch.distributed as dist

_GROUP = None


def pipeline_group():
    return _GROUP


def pipeline_world_size():
    return dist.get_world_size(group=_GROUP)


def pipeline_rank():
    return dist.get_rank(group=_GROUP)


def recv_forward():
    return None


def send_forward(tensor):
    return None
