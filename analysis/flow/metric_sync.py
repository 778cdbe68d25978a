"""Metrics whose value is already global: a ``torchmetrics`` metric's ``compute()`` gathers its
state across the process group by default (``synced_metric``; the evaluator asks it through the
hub, so that a value reported from it is the same on every rank: DDP220)."""
from __future__ import annotations

import ast

from ..semantic import get_arg

_MOVES = frozenset({"to", "cuda", "cpu"})


def synced_metric(hub, view, recv, at, depth: int = 0) -> bool:
    """``recv`` holds a ``torchmetrics`` metric (every origin is a call of a class of that package,
    maybe moved: ``MeanMetric().to(device)``) whose ``compute()`` synchronises its state across the
    process group: the library default (``sync_on_compute=True``: the running states are
    all-gathered when ``torch.distributed`` is initialised), unless its constructor says
    ``sync_on_compute=False``. The result of ``compute()`` is then the same on every rank."""
    from .origins import origins  # lazy: origins asks the value layer

    got = origins(hub, view, recv, at) if depth < 3 else ()
    if not got:
        return False
    for v, e in got:
        while isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr in _MOVES:
            e = e.func.value
        if isinstance(e, (ast.Name, ast.Attribute)):
            if not synced_metric(hub, v, e, e, depth + 1):
                return False
            continue
        if not isinstance(e, ast.Call) or not (v.sem.call_qualname(e) or "").startswith("torchmetrics."):
            return False
        flag = get_arg(e, None, "sync_on_compute")
        if flag is not None and not (isinstance(flag, ast.Constant) and flag.value is True):
            return False
    return True
