from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..flow.modern import hub, origins
from ..flow.tensors import FROM_LOCAL

_DT = ("torch.distributed.tensor.distribute_tensor", "torch.distributed._tensor.distribute_tensor", *FROM_LOCAL)
_DT_METHODS = ("redistribute",)
_PLAIN_FACTORIES = frozenset(f"torch.{n}" for n in (
    "tensor", "randn", "rand", "zeros", "ones", "empty", "full", "arange", "randint", "zeros_like",
    "ones_like", "randn_like", "as_tensor", "from_numpy", "linspace", "eye"))
_PLAIN_METHODS = ("to_local", "full_tensor")
_OPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.MatMult, ast.FloorDiv, ast.Pow, ast.Mod)


class DTensorMixedWithTensor(Rule):
    """
    ## What it does
    Checks for an arithmetic operation (`+ - * / @ // % **`, and `torch.matmul`/`torch.add`-style
    calls of two tensors) between a DTensor (from `distribute_tensor`, `DTensor.from_local` or
    `.redistribute(...)`) and a plain tensor (a `torch.tensor`/`randn`/`zeros`/... factory, or
    the result of `.to_local()` / `.full_tensor()`). Each side may come through names, tuples,
    helpers and attributes of `self`.

    ## Why is this bad?
    DTensor's operator dispatch refuses a plain `torch.Tensor` operand that is not a scalar:

    ```
    RuntimeError: aten.add.Tensor: got mixed torch.Tensor and DTensor, need to convert all
    torch.Tensor to DTensor before calling distributed operators!
    ```

    It raises on every rank, usually deep in a training step after minutes of set-up.

    ## Example
    ```python
    w = distribute_tensor(weight, mesh, [Shard(0)])
    bias = torch.zeros(out_features)
    y = w + bias
    ```

    ## Use instead
    ```python
    bias = distribute_tensor(torch.zeros(out_features), mesh, [Replicate()])
    y = w + bias
    ```
    or compute on the local shard (`w.to_local() + bias_shard`).

    ## Fix safety
    There is no automatic fix: the placement of the plain operand is a design choice.
    """

    code = "DDP511"
    name = "dtensor-mixed-with-tensor"
    severity = Severity.ERROR
    requires_text = ("distribute_tensor", "from_local", "redistribute")
    node_types = (ast.BinOp,)  # indexed by the traversal for ``finish`` (no visit of its own)

    def finish(self, ctx) -> None:
        an, view = hub(ctx)
        # the module's binary operations and calls, from the traversal's indexes (``node_types``)
        for n in (*view.sem.by_type.get(ast.BinOp, ()), *view.sem.calls):
            if isinstance(n, ast.BinOp) and isinstance(n.op, _OPS):
                a, b = n.left, n.right
            elif isinstance(n, ast.Call) and (ctx.qn(n) or "") in ("torch.matmul", "torch.add", "torch.mul",
                                                                   "torch.mm", "torch.sub") and len(n.args) == 2:
                a, b = n.args
            else:
                continue
            ka, kb = _kind(an, view, a, n), _kind(an, view, b, n)
            if {ka, kb} == {"dtensor", "plain"}:
                dt, pl = (a, b) if ka == "dtensor" else (b, a)
                ctx.report(n, f"`{ctx.text(n)}` mixes the DTensor `{ctx.text(dt)}` with the plain tensor "
                              f"`{ctx.text(pl)}`: DTensor raises \"got mixed torch.Tensor and DTensor\"")


def _kind(an, view, expr, at):
    kinds = set()
    got = origins(an, view, expr, at)
    if not got:
        return None
    for v, e in got:
        if not isinstance(e, ast.Call):
            return None
        qn = v.sem.call_qualname(e) or ""
        f = e.func
        if qn in _DT or (isinstance(f, ast.Attribute) and f.attr in _DT_METHODS and not qn):
            kinds.add("dtensor")
        elif qn in _PLAIN_FACTORIES and not _is_scalar(e) or (
                isinstance(f, ast.Attribute) and f.attr in _PLAIN_METHODS and not qn):
            kinds.add("plain")
        else:
            return None
    return kinds.pop() if len(kinds) == 1 else None


def _is_scalar(call) -> bool:
    """``torch.tensor(2.0)``: a 0-d tensor (DTensor accepts those)."""
    return bool(call.args) and isinstance(call.args[0], ast.Constant) and len(call.args) == 1 and \
        (call.func.attr if isinstance(call.func, ast.Attribute) else "") == "tensor"
