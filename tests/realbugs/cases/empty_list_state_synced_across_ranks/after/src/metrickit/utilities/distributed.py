from typing import Any, List, Optional

import torch
import torch.distributed as dist
from torch import Tensor


def gather_all_tensors(result: Tensor, group: Optional[Any] = None) -> List[Tensor]:
    if group is None:
        group = dist.group.WORLD
    result = result.contiguous()
    world_size = dist.get_world_size(group)
    local_size = torch.tensor(result.shape, device=result.device)
    sizes = [torch.zeros_like(local_size) for _ in range(world_size)]
    dist.all_gather(sizes, local_size, group=group)
    max_size = torch.stack(sizes).max(dim=0).values
    pad = []
    for dim in reversed(range(result.ndim)):
        pad += [0, int(max_size[dim] - local_size[dim])]
    padded = torch.nn.functional.pad(result, pad)
    out = [torch.zeros_like(padded) for _ in range(world_size)]
    dist.all_gather(out, padded, group=group)
    return [t[tuple(slice(0, int(d)) for d in size)] for t, size in zip(out, sizes)]
