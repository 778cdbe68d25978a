import torch
import torch.distributed


class NoisyOptimizer:
    def __init__(self, optimizer, noise, expected_batch_size):
        self.optimizer = optimizer
        self.noise = noise
        self.expected_batch_size = expected_batch_size


class PrivateEngine:
    def __init__(self, noise=1.0):
        self.noise = noise

    def make_private(self, module, optimizer, data_loader, distributed=False):
        sample_rate = 1 / len(data_loader)
        expected_batch_size = int(len(data_loader.dataset) * sample_rate)

        opt = NoisyOptimizer(optimizer, self.noise, expected_batch_size)
        if distributed:
            module = torch.nn.parallel.DistributedDataParallel(module)
        return module, opt, data_loader
