from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import parent
from ..flow.hidden import is_fsdp2
from ._common import D
from ..flow.modern import hub

_NORMS = ("torch.norm", "torch.linalg.norm", "torch.linalg.vector_norm")


class LocalGradNorm(Rule):
    """
    ## What it does
    Checks for a gradient norm computed from the *local shards* of a `fully_shard` module's
    gradients (`p.grad.to_local()`, `p.grad._local_tensor`, for `p` in `model.parameters()`) in a
    function that never reduces it across ranks (no `all_reduce`, no `full_tensor()`). The model
    may reach the function as a parameter or an attribute of `self`.

    ## Why is this bad?
    Under FSDP2 each rank holds 1/N of every gradient. The norm of the local shards is this rank's
    part of the global norm, and differs between ranks: logged as "grad norm" it is wrong by about
    a factor of sqrt(N), and used to clip or to skip a step it makes the ranks decide differently
    (a skipped step on some ranks is a hang at the next reduce-scatter).

    ## Example
    ```python
    sq = sum(p.grad.to_local().norm() ** 2 for p in model.parameters() if p.grad is not None)
    logger.log({"grad_norm": sq.sqrt().item()})
    ```

    ## Use instead
    ```python
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=float("inf"))
    logger.log({"grad_norm": grad_norm.full_tensor().item()})
    ```

    ## Fix safety
    There is no automatic fix.
    """

    code = "DDP516"
    name = "local-grad-norm"
    severity = Severity.WARNING
    requires_text = ("to_local", "_local_tensor")

    def finish(self, ctx) -> None:
        an, view = hub(ctx)
        sem = view.sem
        reduced = {sem.enclosing_function(c) for c in ctx.calls_to(D + "all_reduce", D + "reduce")}
        reduced |= {sem.enclosing_function(c) for c in sem.calls
                    if isinstance(c.func, ast.Attribute) and c.func.attr in ("full_tensor", "redistribute")}
        done = set()
        cands = list(sem.calls)
        if "_local_tensor" in ctx.src.text:
            cands += [n for n in ast.walk(sem.tree) if isinstance(n, ast.Attribute) and n.attr == "_local_tensor"]
        for c in cands:
            local = _local_grad(c)
            if local is None:
                continue
            fn = sem.enclosing_function(c)
            if fn in reduced or id(fn) in done:
                continue
            p = local.value  # ``p`` of ``p.grad``
            if not isinstance(p, ast.Name) or not _over_fsdp2_params(an, view, p.id, c):
                continue
            norm = _norm_around(ctx, c)
            if norm is None:
                continue
            done.add(id(fn))
            ctx.report(norm, f"`{ctx.text(norm)}` is the norm of this rank's gradient shards "
                             f"(`{ctx.text(local)}`) and is never reduced across ranks: it is not the global "
                             "gradient norm, and differs between ranks")


def _local_grad(node):
    """``p.grad.to_local()`` / ``p.grad._local_tensor``: the ``p.grad`` attribute, or None."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "to_local":
        g = node.func.value
    elif isinstance(node, ast.Attribute) and node.attr == "_local_tensor":
        g = node.value
    else:
        return None
    if isinstance(g, ast.Attribute) and g.attr == "grad":
        return g
    return None


def _norm_around(ctx, node):
    """The norm computed from ``node``: ``node.norm(...)``, ``torch.norm(node)``, or a
    ``vector_norm`` of it, up a few enclosing expressions."""
    p, child = parent(node), node
    for _ in range(4):
        if p is None or isinstance(p, ast.stmt):
            return None
        if isinstance(p, ast.Attribute) and p.attr == "norm" and p.value is child:
            q = parent(p)
            return q if isinstance(q, ast.Call) else None
        if isinstance(p, ast.Call) and (ctx.qn(p) or "") in _NORMS:
            return p
        p, child = parent(p), p
    return None


def _over_fsdp2_params(an, view, name, at) -> bool:
    """``name`` is the target of a ``for`` / comprehension over ``X.parameters()`` of an FSDP2 ``X``."""
    p = parent(at)
    while p is not None and not isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
        gens = p.generators if isinstance(p, (ast.ListComp, ast.GeneratorExp, ast.SetComp)) else (
            [p] if isinstance(p, ast.For) else [])
        for g in gens:
            t, it = g.target, g.iter
            if isinstance(t, ast.Tuple) and t.elts:
                t = t.elts[-1]
            if isinstance(t, ast.Name) and t.id == name and isinstance(it, ast.Call) and \
                    isinstance(it.func, ast.Attribute) and it.func.attr in ("parameters", "named_parameters"):
                return is_fsdp2(an, view, it.func.value, at)
        p = parent(p)
    return False
