import torch
from torch.nn.parallel import DistributedDataParallel


class State:
    def __init__(self, model, optimizers):
        self.model = model
        self.optimizers = optimizers
        self.serialized = ["model", "optimizers"]

    @property
    def is_model_ddp(self):
        return isinstance(self.model, DistributedDataParallel)

    def state_dict(self):
        out = {}
        for name in self.serialized:
            value = getattr(self, name)
            if name == "model":
                # the model may be wrapped by DistributedDataParallel
                serialized = value.state_dict()
                if self.is_model_ddp:
                    torch.nn.modules.utils.consume_prefix_in_state_dict_if_present(serialized, "module.")
            else:
                serialized = [o.state_dict() for o in value]
            out[name] = serialized
        return out

    def save(self, path):
        torch.save(self.state_dict(), path)
