"""Tensor constructors: which calls build a tensor, and which build it on the CPU."""
from __future__ import annotations

import ast

from .origins import origins

TENSOR_CTORS = frozenset({
    "torch.tensor", "torch.zeros", "torch.ones", "torch.empty", "torch.full", "torch.arange",
    "torch.rand", "torch.randn", "torch.randint", "torch.randperm", "torch.linspace", "torch.eye",
    "torch.as_tensor", "torch.from_numpy", "torch.Tensor", "torch.FloatTensor", "torch.LongTensor",
    "torch.IntTensor", "torch.DoubleTensor", "torch.HalfTensor", "torch.BoolTensor", "torch.ByteTensor",
})
# constructors without a ``device=`` keyword (a fix cannot add one)
NO_DEVICE_KW = frozenset({"torch.from_numpy", "torch.Tensor", "torch.FloatTensor", "torch.LongTensor",
                          "torch.IntTensor", "torch.DoubleTensor", "torch.HalfTensor", "torch.BoolTensor",
                          "torch.ByteTensor"})


def cpu_tensor_ctor(ctx, expr: ast.AST) -> ast.Call | None:
    """``expr`` when it is a tensor constructor call that builds on the CPU (no ``device=``)."""
    if not isinstance(expr, ast.Call):
        return None
    qn = ctx.qn(expr)
    if qn not in TENSOR_CTORS:
        return None
    if any(k.arg is None or k.arg == "device" for k in expr.keywords):
        return None
    if qn == "torch.as_tensor" and len(expr.args) >= 3:
        return None
    if any(isinstance(a, ast.Starred) for a in expr.args):
        return None
    return expr


def tensor_ctor(ctx, expr: ast.AST) -> bool:
    """``expr`` is a call of a tensor constructor (``torch.zeros(...)``, ``torch.tensor(...)``)."""
    return isinstance(expr, ast.Call) and ctx.qn(expr) in TENSOR_CTORS


# ``DTensor.from_local`` under its public and older module paths
FROM_LOCAL = ("torch.distributed.tensor.DTensor.from_local", "torch.distributed._tensor.DTensor.from_local",
              "torch.distributed.tensor._api.DTensor.from_local", "torch.distributed._tensor.api.DTensor.from_local")

# calls whose result is a DTensor replicated on every rank when the inputs are DTensors: the total
# gradient norm, which torch reduces inside (torch 2.13: `Replicate()` under FSDP2, verified on gloo)
REPLICATED_RESULTS = frozenset({"torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad.clip_grad_norm_"})


def replicated_dtensor(hub, view, expr, at) -> bool:
    """Every value ``expr`` may hold at ``at`` is replicated on every rank (``REPLICATED_RESULTS``):
    its ``full_tensor()`` gathers nothing, so it runs no collective."""
    got = origins(hub, view, expr, at)
    return bool(got) and all(isinstance(e, ast.Call) and v.sem.call_qualname(e) in REPLICATED_RESULTS for v, e in got)
