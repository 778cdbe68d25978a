import torch
from torch import Tensor

from metrickit.utilities.data import _running_sum


def tie_groups(sorted_values: Tensor) -> Tensor:
    starts = torch.cat([torch.ones(1, dtype=torch.int, device=sorted_values.device),
                        (sorted_values[1:] != sorted_values[:-1]).int()])
    return _running_sum(starts.float(), dim=0)
