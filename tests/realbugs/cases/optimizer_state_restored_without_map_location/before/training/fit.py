import os

import torch


def to_device_fn(gpu):
    def _map(storage, location):
        return storage.cuda(gpu) if gpu >= 0 else storage
    return _map


class Fitter:
    def __init__(self, model, optimizer, out_prefix, gpu=-1):
        self.model = model
        self.optimizer = optimizer
        self.out_prefix = out_prefix
        self.gpu = gpu

    def _resume(self, epoch):
        weights_path = os.path.join(self.out_prefix, "weights_ep{}.th".format(epoch))
        extra_path = os.path.join(self.out_prefix, "state_ep{}.th".format(epoch))
        weights = torch.load(weights_path, map_location=to_device_fn(self.gpu))
        extra = torch.load(extra_path)
        self.model.load_state_dict(weights)
        self.optimizer.load_state_dict(extra["optim"])
        return extra["epoch"]
