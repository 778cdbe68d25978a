import re

import torch
import torch.distributed as dist


def params_and_buffers(module):
    assert isinstance(module, torch.nn.Module)
    return list(module.parameters()) + list(module.buffers())


def named_params_and_buffers(module):
    assert isinstance(module, torch.nn.Module)
    return list(module.named_parameters()) + list(module.named_buffers())


def check_ddp_consistency(module, ignore_regex=None):
    """Assert that every rank holds rank 0's values (names matching ignore_regex are skipped)."""
    for name, tensor in named_params_and_buffers(module):
        qualified = type(module).__name__ + "." + name
        if ignore_regex is not None and re.fullmatch(ignore_regex, qualified):
            continue
        mine = tensor.detach()
        reference = mine.clone()
        dist.broadcast(tensor=reference, src=0)
        assert torch.equal(mine, reference), qualified
