from __future__ import annotations

import ast

from ..semantic import get_arg
from ..torch_api import D
from ..flow import for_context
from ..flow.params import by_name_only, designates_by_default
from ..flow.summaries import ROOTS, on_subgroup, root_arg
from ..model import Severity
from ..registry import Rule
from ._flow import FLOW_TEXT, node_related, scopes, source_related, source_words, text, vtext, where

_ROOT_QNS = tuple(D + n for n in ROOTS)  # (spelled once, asked every check)
_GROUP_QNS = (D + "new_group",)


class RankVaryingRoot(Rule):
    """
    ## What it does
    Checks for a rooted collective (`broadcast`, `reduce`, `gather`, `scatter` and the object
    variants `broadcast_object_list`, `gather_object`, `scatter_object_list`) whose `src` / `dst`
    differs between ranks: the rank itself (`dst=local_rank`, `src=dist.get_rank()`), or something
    computed from it or from this rank's data.

    The same holds for the member list of `dist.new_group(ranks)`, which every rank of the default
    group must call for every group, with the same members, in the same order: a list computed from
    this rank (`new_group(list(range(rank - rank % k, rank - rank % k + k)))`, a `while rank not in
    perm[i:i + k]: i += k` search), or a list picked from a shared layout by a test on the rank
    (`next(p for p in layout if rank in p)`, `[p for p in layout if rank in p][0]`,
    `filter(lambda p: rank in p, layout)`, `for p in layout: if rank in p: mine = p`) means each
    rank makes only the group it belongs to. A group of one
    (`new_group([dist.get_rank()])`) and `use_local_synchronization=True` (made by its members only)
    are not flagged.

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

    ```python
    first = rank - rank % 2
    pair = dist.new_group([first, first + 1])  # rank 2 makes [2, 3] while rank 0 makes [0, 1]
    ```

    ## Use instead
    ```python
    dist.reduce(loss, dst=0)
    if dist.get_rank() == 0:
        print(loss / dist.get_world_size())
    ```

    ```python
    for first in range(0, world_size, 2):  # every rank makes every group, in order
        g = dist.new_group([first, first + 1])
        if rank in (first, first + 1):
            pair = g
    ```

    ## Fix safety
    There is no automatic fix: which rank should be the root, and how the groups are laid out, is
    the program's decision.
    """

    code = "DDP108"
    name = "rank-varying-root"
    severity = Severity.ERROR
    fix_availability = "never"
    requires_text = ("src", "dst", "broadcast", "reduce", "gather", "scatter", "new_group", *FLOW_TEXT)
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
        self._group_members(ctx, ev)
        self._through_helpers(ctx, an)

    def _group_members(self, ctx, ev) -> None:
        """``new_group(ranks)`` whose member list differs between ranks (each rank builds only the
        group it belongs to): every rank of the default group must make every group, with the same
        members, in the same order. A group of one (``new_group([dist.get_rank()])``) needs no
        exchange between its members and is left alone."""
        for c in ctx.calls_to(*_GROUP_QNS):
            op = ctx.qn(c)[len(D):]
            v_local = get_arg(c, None, "use_local_synchronization")
            if v_local is not None and not (isinstance(v_local, ast.Constant) and v_local.value is False):
                continue  # made by its members only: each member passes its own group's list
            members = get_arg(c, 0, "ranks")
            if members is None or isinstance(members, (ast.List, ast.Tuple)) and len(members.elts) == 1:
                continue
            v = ev.value(members)
            if not v.varying:
                continue
            if by_name_only(v) and designates_by_default(ctx.sem.enclosing_function(c), members):
                continue
            ctx.report(
                members,
                f"the members `{text(ctx, members)}` of `{op}` are rank-varying ({source_words(ctx, v)}); every "
                "rank must make every group with the same members in the same order, or the groups are "
                "mismatched and their first collective hangs. Loop over all the groups on every rank and "
                "keep the one this rank is in",
                related=source_related(ctx, v),
            )

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

