import torch


def read_checkpoint(path, map_location=None):
    return torch.load(path, map_location=map_location)


class FromPretrained:
    def __init__(self, path, prefix=None, map_location="cpu"):
        self.path = path
        self.prefix = prefix
        self.map_location = map_location

    def __call__(self, module):
        state = read_checkpoint(self.path, map_location=self.map_location)
        if self.prefix is not None:
            state = {k[len(self.prefix):]: v for k, v in state.items() if k.startswith(self.prefix)}
        module.load_state_dict(state, strict=False)
        return module
