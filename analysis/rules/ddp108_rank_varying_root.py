from __future__ import annotations

import ast


from ..torch_api import D
from ..flow import for_context
from ..flow.params import by_name_only, designates_by_default
from ..flow.summaries import ROOTS, on_subgroup, root_arg
from ..model import Severity
from ..registry import Rule
from ._flow import FLOW_TEXT, node_related, scopes, source_related, source_words, text, vtext, where

_ROOT_QNS = tuple(D + n for n in ROOTS)  # (spelled once, asked every check)


class RankVaryingRoot(Rule):
    """
    ## What it does
    Checks for a rooted collective (`broadcast`, `reduce`, `gather`, `scatter` and the object
    variants `broadcast_object_list`, `gather_object`, `scatter_object_list`) whose `src` / `dst`
    differs between ranks: the rank itself (`dst=local_rank`, `src=dist.get_rank()`), or something
    computed from it or from this rank's data.

    Collectives on an explicit subgroup (`group=`) are not checked: a root computed from the rank
    is often the same for every member of that subgroup.

    The root may come through a helper (in this file or another of the project) that takes it as a
    parameter: `sync_weights(w, rank)` where `def sync_weights(t, owner): dist.broadcast(t,
    src=owner)`. The finding is then reported at the call, where the fix goes: the helper is right
    for a root every rank agrees on, and other calls may pass one. The related locations show the
    root inside the helper and the source of the variance.

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
    requires_text = ("src", "dst", "broadcast", "reduce", "gather", "scatter", *FLOW_TEXT)
    requires_reach = True  # a collective site in this file or a module it imports (flow.reach)

    def finish(self, ctx) -> None:
        an = for_context(ctx)
        ev = an.evaluator(an.main)
        for c in ctx.calls_to(*_ROOT_QNS):
            op = ctx.qn(c)[len(D):]
            if on_subgroup(c, op):
                continue
            root = root_arg(c, op)
            if root is None:
                continue
            v = ev.value(root)
            if not v.varying:
                continue
            if by_name_only(v) and designates_by_default(ctx.sem.enclosing_function(c), root):
                # the root is the function's own parameter, rank-like by its name alone, with a
                # constant default (``def sync(obj, rank: int = 0): broadcast_object_list(...,
                # src=rank)``): it designates the root its callers choose; a caller passing its own
                # rank is reported at that call (``_through_helpers``)
                continue
            ctx.report(
                root,
                f"the root `{text(ctx, root)}` of `{op}` is rank-varying ({source_words(ctx, v)}); every rank "
                "must name the same root, or the ranks wait for different peers",
                related=source_related(ctx, v),
            )
        self._through_helpers(ctx, an)

    def _through_helpers(self, ctx, an) -> None:
        """A helper (this file or another of the project) whose rooted collective takes its root
        from a parameter, called with a rank-varying argument: reported at the call, where the fix
        goes (the helper is right for a uniform argument, and other calls may pass one)."""
        main = an.main
        for sc in scopes(ctx):
            for c, target in an.helper_calls(main, sc):
                if not (c.args or c.keywords):
                    continue
                got = an.varying_roots(main, c, target)
                for tv, coll, op, root, v in got[:1]:
                    outer = getattr(target[1], "name", "?")
                    inner = getattr(tv.sem.enclosing_function(coll), "name", outer)
                    via = f" (through `{outer}`)" if inner != outer else ""
                    ctx.report(
                        c,
                        f"`{text(ctx, c)}` makes the root of `{op}` inside `{inner}`{via} rank-varying: "
                        f"`{vtext(tv, root)}` ({where(ctx, tv.path, coll)}) comes from {source_words(ctx, v)}; "
                        "every rank must name the same root, or the ranks wait for different peers",
                        related=[node_related(ctx, tv.path, root, "the root inside the callee"),
                                 *[r for r in source_related(ctx, v)
                                   if not (isinstance(r[0], ast.AST) and r[0] is c)]],
                    )

