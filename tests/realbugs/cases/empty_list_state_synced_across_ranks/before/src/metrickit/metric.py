from typing import Any, Callable, Dict, Optional

import torch
from torch import Tensor
from torch.nn import Module

from metrickit.utilities.data import _flatten, apply_to_collection, dim_zero_cat, dim_zero_sum
from metrickit.utilities.distributed import gather_all_tensors


class Metric(Module):
    """Accumulates state over batches; states may be tensors or lists of tensors."""

    def __init__(self, process_group: Optional[Any] = None) -> None:
        super().__init__()
        self.process_group = process_group
        self._defaults: Dict[str, Any] = {}
        self._reductions: Dict[str, Optional[Callable]] = {}

    def add_state(self, name: str, default, dist_reduce_fx: Optional[Callable] = None) -> None:
        setattr(self, name, default)
        self._defaults[name] = default
        self._reductions[name] = dist_reduce_fx

    def _sync_dist(self, dist_sync_fn: Callable = gather_all_tensors, process_group: Optional[Any] = None) -> None:
        states = {name: getattr(self, name) for name in self._reductions}

        for name, reduce_fn in self._reductions.items():
            # one gather per list state: concatenate its pieces first
            if reduce_fn == dim_zero_cat and isinstance(states[name], list) and len(states[name]) > 1:
                states[name] = [dim_zero_cat(states[name])]

        gathered = apply_to_collection(states, Tensor, dist_sync_fn, group=process_group or self.process_group)

        for name, reduce_fn in self._reductions.items():
            if isinstance(gathered[name], list) and len(gathered[name]) == 0:
                setattr(self, name, [])
                continue
            if isinstance(gathered[name][0], Tensor):
                gathered[name] = torch.stack(gathered[name])
            elif isinstance(gathered[name][0], list):
                gathered[name] = _flatten(gathered[name])
            setattr(self, name, reduce_fn(gathered[name]) if reduce_fn is not None else gathered[name])


class MeanOfValues(Metric):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.add_state("values", [], dist_reduce_fx=dim_zero_cat)
        self.add_state("count", torch.tensor(0), dist_reduce_fx=dim_zero_sum)

    def update(self, x: Tensor) -> None:
        self.values.append(x.flatten())
        self.count += x.numel()

    def compute(self) -> Tensor:
        return dim_zero_cat(self.values).sum() / self.count
