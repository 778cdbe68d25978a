from __future__ import annotations

import ast

from ..model import Applicability, Severity
from ..registry import Rule
from ..semantic import iter_scope_nodes, get_arg
from ..flow.tensors import tensor_ctor
from ._common import D

# op -> (position, keyword) of the output tensor list
_OPS = {
    "all_gather": (0, "tensor_list"),
    "gather": (1, "gather_list"),
    "all_to_all": (0, "output_tensor_list"),
    "all_gather_coalesced": (0, "output_tensor_lists"),
}
_FRESH = frozenset({"torch.empty_like", "torch.zeros_like", "torch.ones_like", "torch.rand_like",
                    "torch.randn_like", "torch.full_like"})


class AliasedOutputList(Rule):
    """
    ## What it does
    Checks for an output list built as `[t] * n` (one tensor object repeated) passed to
    `all_gather`, `gather` or `all_to_all`, directly or through a variable assigned once.

    ## Why is this bad?
    `[t] * n` is a list of `n` references to **one** tensor. The collective writes every rank's
    data into that same storage, so all slots end up holding the last rank's tensor (or whatever the
    backend wrote last). Nothing fails: the result is silently wrong, e.g. `torch.cat(out)` repeats
    one rank's data `n` times.

    ## Example
    ```python
    out = [torch.zeros_like(t)] * dist.get_world_size()
    dist.all_gather(out, t)
    ```

    ## Use instead
    ```python
    out = [torch.zeros_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(out, t)
    ```

    ## Fix safety
    The fix rewrites the list as a comprehension that builds one tensor per slot:
    `[<element> for _ in range(n)]` when the element is a tensor constructor
    (`torch.zeros_like(t)`, `torch.empty(...)`), `[torch.empty_like(t) for _ in range(n)]` when it is
    an existing tensor `t`. It is **safe**: the slots are overwritten by the collective, and they
    now have their own storage.
    """

    code = "DDP102"
    name = "aliased-output-list"
    severity = Severity.ERROR
    fix_availability = "sometimes"
    requires_text = ("gather", "all_to_all")
    requires_text_all = (("distributed",),)  # every qualified name it resolves is torch.distributed.*

    def finish(self, ctx) -> None:
        for op, spec in _OPS.items():
            for call in ctx.calls_to(D + op):
                out = get_arg(call, *spec)
                if out is None:
                    continue
                scope = ctx.sem.scope_of(call)
                target = out
                if isinstance(out, ast.Name):
                    target = ctx.sem.single_value(out.id, scope)
                    if target is None or _rebuilt(out.id, scope):
                        continue
                if isinstance(target, ast.IfExp):  # ``[t] * n if rank == 0 else None``
                    target = target.body
                rep = _repeated(ctx, target)
                if rep is None:
                    continue
                elem, n = rep
                shown = ctx.text(target) if isinstance(target, ast.ListComp) else f"[{_short(ctx, elem)}] * {_short(ctx, n)}"
                ctx.report(
                    target,
                    f"`{_short(ctx, _Text(shown))}` repeats one tensor object: every slot of "
                    f"`{op}`'s output aliases the same storage, and the result is silently wrong",
                    related=[(call, f"passed to `{op}` here")] if target is not out else [],
                    fix=_make_fix(ctx, target, elem, n),
                )


def _rebuilt(name: str, scope) -> bool:
    """``out[i] = ...`` or a mutating method on the list: the slots may get their own tensors."""
    for n in iter_scope_nodes(scope):
        if isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store) and isinstance(n.value, ast.Name) \
                and n.value.id == name:
            return True
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == name and n.attr in (
                "append", "extend", "insert", "__setitem__"):
            return True
    return False


class _Text(str):
    pass


def _short(ctx, node) -> str:
    t = node if isinstance(node, _Text) else ctx.text(node)
    return t if len(t) <= 40 else t[:37] + "..."


def _repeated(ctx, expr):
    """(element, count) for ``[e] * n`` / ``n * [e]`` where ``e`` is a tensor (not None/constant)."""
    if isinstance(expr, ast.ListComp) and len(expr.generators) == 1:
        gen = expr.generators[0]
        e = expr.elt
        if isinstance(e, (ast.Name, ast.Attribute)) and not gen.ifs and not (_names(e) & _names(gen.target)):
            it = gen.iter
            if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" \
                    and len(it.args) == 1 and not it.keywords:
                return e, it.args[0]
        return None
    if not (isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mult)):
        return None
    for seq, n in ((expr.left, expr.right), (expr.right, expr.left)):
        if isinstance(seq, ast.List) and len(seq.elts) == 1:
            e = seq.elts[0]
            if isinstance(e, (ast.Constant, ast.List, ast.Tuple, ast.Starred, ast.Dict, ast.ListComp)):
                return None
            if isinstance(n, ast.Constant) and n.value in (0, 1):
                return None
            return e, n
    return None


def _names(node) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _make_fix(ctx, target, elem, n):
    if "_" in _names(elem) | _names(n) and not isinstance(target, ast.ListComp):
        return None
    if isinstance(elem, ast.Call) and (tensor_ctor(ctx, elem) or ctx.qn(elem) in _FRESH):
        new_elem = ctx.text(elem)
        imp = []
    elif isinstance(elem, (ast.Name, ast.Attribute)):
        empty_like, imp = ctx.ref("torch.empty_like")
        new_elem = f"{empty_like}({ctx.text(elem)})"
    else:
        return None
    if "\n" in new_elem:
        return None
    new = f"[{new_elem} for _ in range({ctx.text(n)})]"
    return ctx.fix(Applicability.SAFE, f"Build one tensor per slot: `{new}`", [ctx.replace(target, new), *imp])
