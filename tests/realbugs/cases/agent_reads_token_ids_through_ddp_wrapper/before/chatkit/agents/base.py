import torch
import torch.distributed as dist


class GeneratorAgent:
    def __init__(self, opt, shared=None):
        self.opt = opt
        self.vocab = {"<s>": 0, "</s>": 1, "<pad>": 2, "hi": 3}
        self.model = self.build_model()
        if dist.is_initialized():
            self.model = torch.nn.parallel.DistributedDataParallel(
                self.model.cuda(), device_ids=[torch.cuda.current_device()])

    def build_model(self):
        raise NotImplementedError
