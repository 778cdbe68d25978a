from __future__ import annotations

import ast

from ..torch_api import D
from ..flow import for_context
from ..flow.bindings import reaching
from ..flow.summaries import on_subgroup
from ..flow.uniformity import U, X, join
from ..model import Severity
from ..registry import Rule
from ..semantic import get_arg
from ._flow import source_related, source_words, text

# collective -> (position, keyword) of the tensor whose shape must match across ranks
SHAPED = {
    "all_gather": (1, "tensor"), "all_gather_into_tensor": (1, "input_tensor"),
    "_all_gather_base": (1, "input_tensor"), "all_reduce": (0, "tensor"),
    "reduce_scatter": (0, "output"), "reduce_scatter_tensor": (1, "input"),
}
_SIZED_CTORS = frozenset({"torch.zeros", "torch.ones", "torch.empty", "torch.rand", "torch.randn"})
_KEEP_SHAPE = frozenset({"to", "cuda", "cpu", "contiguous", "float", "half", "double", "long", "int", "bool",
                         "clone", "detach", "type_as", "bfloat16", "requires_grad_"})
_RESHAPE = frozenset({"view", "reshape", "expand", "repeat", "narrow", "new_zeros", "new_ones", "new_empty",
                      "new_full"})


class RankVaryingShape(Rule):
    """
    ## What it does
    Checks for the tensor given to `all_gather`, `all_gather_into_tensor`, `all_reduce`,
    `reduce_scatter` or `reduce_scatter_tensor` when its shape is computed from sizes that differ
    between ranks: a slice `x[:, :n]` or a constructor `torch.zeros(n)` where `n` comes from the rank
    or from this rank's data (`lengths.max()` over the local batch), with no padding to a size
    every rank agrees on.

    Not flagged: sizes made uniform by a collective first (`dist.all_reduce(max_len, op=MAX)`), and
    padded tensors (`F.pad`), whose shape the analysis leaves unknown.

    ## Why is this bad?
    These collectives need the same shape on every rank. NCCL does not check: mismatched sizes
    corrupt the output, hang, or fail much later with an unrelated-looking error such as
    `RuntimeError: Tensors must be CUDA and dense` or a size mismatch in the next operation.

    ## Example
    ```python
    local_max = int(lengths.max())          # differs per rank
    out = [torch.empty_like(x[:, :local_max]) for _ in range(world_size)]
    dist.all_gather(out, x[:, :local_max])
    ```

    ## Use instead
    ```python
    max_len = lengths.max().clone()
    dist.all_reduce(max_len, op=dist.ReduceOp.MAX)  # the same on every rank
    padded = F.pad(x, (0, int(max_len) - x.shape[1]))
    out = [torch.empty_like(padded) for _ in range(world_size)]
    dist.all_gather(out, padded)
    ```

    ## Fix safety
    There is no automatic fix.
    """

    code = "DDP109"
    name = "rank-varying-shape"
    severity = Severity.ERROR
    fix_availability = "never"
    requires_text = ("gather", "reduce")

    def finish(self, ctx) -> None:
        calls = ctx.calls_to(*(D + n for n in SHAPED))
        if not calls:
            return
        an = for_context(ctx)
        sh = _Shapes(ctx, an)
        for c in calls:
            op = ctx.qn(c)[len(D):]
            if on_subgroup(c, op):
                continue
            t = get_arg(c, *SHAPED[op])
            if t is None:
                continue
            v = sh.shape(t, 0)
            if not v.varying:
                continue
            ctx.report(
                t,
                f"the shape of `{text(ctx, t)}` is computed from rank-varying sizes ({source_words(ctx, v)}); "
                f"`{op}` needs the same shape on every rank: agree on the size first (all_reduce with MAX) "
                "and pad to it",
                related=source_related(ctx, v),
            )


class _Shapes:
    def __init__(self, ctx, an):
        self.ctx, self.an = ctx, an
        self.view = an.main
        self.ev = an.evaluator(an.main)

    def sizes(self, nodes) -> object:
        return join(self.ev.value(n) for n in nodes)

    def shape(self, e: ast.AST, d: int):
        if d > 8 or e is None:
            return X
        qn = self.ctx.qn(e) if isinstance(e, ast.Call) else None
        if isinstance(e, ast.Name):
            kind, evs = reaching(self.view, e.id, e)
            if kind not in ("events", "global") or not evs:
                return X
            out = []
            for ev in evs:
                if isinstance(ev, ast.Assign) and len(ev.targets) == 1 and isinstance(ev.targets[0], ast.Name):
                    out.append(self.shape(ev.value, d + 1))
                elif isinstance(ev, ast.Call):
                    continue  # an in-place collective keeps the shape
                else:
                    out.append(X)
            return join(out) if out else X
        if isinstance(e, ast.Subscript):
            sl = e.slice
            parts = sl.elts if isinstance(sl, ast.Tuple) else [sl]
            bounds = []
            for p in parts:
                if isinstance(p, ast.Slice):
                    bounds.extend(x for x in (p.lower, p.upper, p.step) if x is not None)
            v = self.sizes(bounds) if bounds else U
            return v if v.varying else join((v, self.shape(e.value, d + 1)))
        if isinstance(e, ast.Call):
            if qn in _SIZED_CTORS:
                sizes = [a for a in e.args if not isinstance(a, ast.Starred)]
                size_kw = get_arg(e, None, "size")
                v = self.sizes(sizes + ([size_kw] if size_kw is not None else []))
                return v if v.varying else (U if v.uniform else X)
            if qn == "torch.full" and e.args:
                v = self.sizes([e.args[0]])
                return v if v.varying else X
            f = e.func
            if isinstance(f, ast.Attribute) and qn is None:
                if f.attr in _KEEP_SHAPE:
                    return self.shape(f.value, d + 1)
                if f.attr in _RESHAPE:
                    v = self.sizes([*e.args, *(k.value for k in e.keywords)])
                    return v if v.varying else X
            return X
        return X
