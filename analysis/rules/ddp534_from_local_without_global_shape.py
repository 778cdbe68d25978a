from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import get_arg
from ..flow.modern import hub
from ..flow.sharded_params import sharded_param
from ..flow.tensors import FROM_LOCAL
from ._common import other_call_sites



class FromLocalWithoutGlobalShape(Rule):
    """
    ## What it does
    Checks for `DTensor.from_local(local, mesh, p.placements)` that re-wraps a local tensor in the
    layout of `p`, a parameter of a module sharded with FSDP2 (`fully_shard`), without passing
    `shape=` (and `stride=`). The parameter is followed from the placements it lends: a loop or
    a comprehension over the module's parameters (`model.parameters()`, a list or a filtered
    comprehension of them, a `self` attribute holding one, `zip(...)` / `enumerate(...)` of it),
    or a helper's parameter that every call passes such a parameter (`wrap_like(local, p)`, in
    other modules too). The module is found sharded where it is given to `fully_shard`, also
    through the constructor of a class built by the training script.

    ## Why is this bad?
    Without `shape`, `from_local` assumes an even sharding and computes the global size as the
    local size times the mesh size. FSDP2 shards every parameter on dim 0 in `torch.chunk`
    pieces, so a parameter whose first dimension is not a multiple of the mesh size (a vocabulary
    of 50,257 rows, a bias of odd size, a small layer on a large mesh) has local shards of
    different sizes: the inferred global shape is wrong, differs between ranks, and a later
    `copy_`, redistribution, `full_tensor()` or checkpoint of the result fails with a size
    mismatch or gathers garbage. The code is right only while every size happens to divide.

    ## Example
    ```python
    def wrap_like(local, ref):
        return DTensor.from_local(local, ref.device_mesh, ref.placements, run_check=False)

    for p, old in zip(params, snapshot):
        p.copy_(wrap_like(old, p))
    ```

    ## Use instead
    ```python
    def wrap_like(local, ref):
        return DTensor.from_local(local, ref.device_mesh, ref.placements, run_check=False,
                                  shape=ref.shape, stride=ref.stride())
    ```

    ## Fix safety
    There is no automatic fix yet; the fix is to pass `shape=ref.shape, stride=ref.stride()`.
    """

    code = "DDP534"
    name = "from-local-without-global-shape"
    severity = Severity.ERROR
    default_enabled = True
    requires_text = ("from_local",)

    def finish(self, ctx) -> None:
        an, view = hub(ctx)
        callers = other_call_sites(ctx, an, methods=True, modules=True)
        for c in ctx.calls_to(*FROM_LOCAL):
            if any(k.arg in ("shape", "stride") or k.arg is None for k in c.keywords):
                continue
            pl = get_arg(c, 2, "placements")
            if not (isinstance(pl, ast.Attribute) and pl.attr == "placements" and isinstance(pl.value, ast.Name)):
                continue
            if not sharded_param(an, view, pl.value, c, callers, tp=False):
                continue
            ref = pl.value.id
            ctx.report(c, f"`DTensor.from_local` takes the placements of `{ref}`, a parameter of a module sharded "
                          "with `fully_shard`, without `shape=`: it assumes an even sharding and infers the global "
                          f"shape as the local one times the mesh size, wrong (and different between ranks) for any "
                          f"parameter whose first dimension the mesh size does not divide; pass "
                          f"`shape={ref}.shape, stride={ref}.stride()`")
