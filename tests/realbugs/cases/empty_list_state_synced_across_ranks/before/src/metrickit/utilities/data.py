from typing import Any, Callable, List

import torch
from torch import Tensor


def dim_zero_cat(x):
    if isinstance(x, Tensor):
        return x
    x = [y.unsqueeze(0) if y.numel() == 1 and y.ndim == 0 else y for y in x]
    if not x:
        raise ValueError("no samples to concatenate")
    return torch.cat(x, dim=0)


def dim_zero_sum(x: Tensor) -> Tensor:
    return torch.sum(x, dim=0)


def _flatten(x: List[list]) -> list:
    return [item for sub in x for item in sub]


def apply_to_collection(data: Any, dtype: type, fn: Callable, **kwargs) -> Any:
    if isinstance(data, dtype):
        return fn(data, **kwargs)
    if isinstance(data, dict):
        return {k: apply_to_collection(v, dtype, fn, **kwargs) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return type(data)(apply_to_collection(v, dtype, fn, **kwargs) for v in data)
    return data
