import sys
import warnings
from typing import Optional

import torch
from torch import Tensor


class MetricsWarning(UserWarning):
    pass


def _count_values(x: Tensor, minlength: Optional[int] = None) -> Tensor:
    """Deterministic replacement for torch.bincount."""
    if minlength is None:
        minlength = len(torch.unique(x))
    if torch.are_deterministic_algorithms_enabled():
        grid = torch.arange(minlength, device=x.device).repeat(len(x), 1)
        return torch.eq(x.reshape(-1, 1), grid).sum(dim=0)
    return torch.bincount(x, minlength=minlength)


def _running_sum(x: Tensor, dim: Optional[int] = 0, dtype: Optional[torch.dtype] = None) -> Tensor:
    """torch.cumsum that still works when deterministic algorithms are enforced on GPU."""
    if torch.are_deterministic_algorithms_enabled() and x.is_cuda and x.is_floating_point() and sys.platform != "win32":
        warnings.warn(
            "cumsum has no deterministic GPU kernel; computing it on the CPU and copying the result back.",
            MetricsWarning,
        )
        return x.cpu().cumsum(dim=dim, dtype=dtype).cuda()
    return torch.cumsum(x, dim=dim, dtype=dtype)
