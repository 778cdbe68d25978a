from __future__ import annotations

from ..torch_api import D
from ..flow import for_context
from ..flow.summaries import on_subgroup
from ..model import Severity
from ..registry import Rule
from ..semantic import get_arg
from ._flow import source_related, source_words, text

# collective -> (position, keyword) of its root rank
ROOTS = {
    "broadcast": (1, "src"), "reduce": (1, "dst"), "gather": (2, "dst"), "scatter": (2, "src"),
    "broadcast_object_list": (1, "src"), "gather_object": (2, "dst"), "scatter_object_list": (2, "src"),
}
_GROUP_ROOTS = ("group_src", "group_dst")


class RankVaryingRoot(Rule):
    """
    ## What it does
    Checks for a rooted collective (`broadcast`, `reduce`, `gather`, `scatter` and the object
    variants `broadcast_object_list`, `gather_object`, `scatter_object_list`) whose `src` / `dst`
    differs between ranks: the rank itself (`dst=local_rank`, `src=dist.get_rank()`), or something
    computed from it or from this rank's data.

    Collectives on an explicit subgroup (`group=`) are not checked: a root computed from the rank
    is often the same for every member of that subgroup.

    ## Why is this bad?
    Every rank must name the same root. With `dst=rank`, each rank believes it is the destination
    of its own reduction: the ranks wait for different peers, the job hangs, or each rank ends up
    with a partial result and no error at all.

    ## Example
    ```python
    dist.reduce(loss, dst=local_rank)
    ```

    ## Use instead
    ```python
    dist.reduce(loss, dst=0)
    if dist.get_rank() == 0:
        print(loss / dist.get_world_size())
    ```

    ## Fix safety
    There is no automatic fix: which rank should be the root is the program's decision.
    """

    code = "DDP108"
    name = "rank-varying-root"
    severity = Severity.ERROR
    fix_availability = "never"
    requires_text = ("src", "dst", "broadcast", "reduce", "gather", "scatter")

    def finish(self, ctx) -> None:
        calls = ctx.calls_to(*(D + n for n in ROOTS))
        if not calls:
            return
        an = for_context(ctx)
        ev = an.evaluator(an.main)
        for c in calls:
            op = ctx.qn(c)[len(D):]
            if on_subgroup(c, op):
                continue
            pos, kw = ROOTS[op]
            root = get_arg(c, pos, kw)
            for gk in _GROUP_ROOTS:
                root = root if root is not None else get_arg(c, None, gk)
            if root is None:
                continue
            v = ev.value(root)
            if not v.varying:
                continue
            ctx.report(
                root,
                f"the root `{text(ctx, root)}` of `{op}` is rank-varying ({source_words(ctx, v)}); every rank "
                "must name the same root, or the ranks wait for different peers",
                related=source_related(ctx, v),
            )
