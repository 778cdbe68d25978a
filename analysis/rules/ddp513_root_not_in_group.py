from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import get_arg
from ._common import D
from ..flow.modern import const_ints, holds_call, hub, origins, qn_pred

# rooted collective -> (position, keyword) of its global root rank, position of ``group``
_ROOTED = {
    "broadcast": ((1, "src"), 2), "reduce": ((1, "dst"), 3), "gather": ((2, "dst"), 3),
    "scatter": ((2, "src"), 3), "broadcast_object_list": ((1, "src"), 2),
    "gather_object": ((2, "dst"), 3), "scatter_object_list": ((2, "src"), 3),
}


class RootNotInGroup(Rule):
    """
    ## What it does
    Checks for a rooted collective (`broadcast`, `reduce`, `gather`, `scatter` and their object
    forms) on a group made by `dist.new_group(ranks=[...])` with constant ranks, whose `src` /
    `dst` is a constant rank that is not a member of the group. The group may come from a helper,
    a tuple or an attribute of `self`.

    ## Why is this bad?
    `src` and `dst` are *global* ranks, even with `group=`: `broadcast(t, src=0, group=g)` on
    `g = new_group([2, 3])` names rank 0, which is not in the group: torch raises on the
    members when it maps the global root to a group rank, and code that catches it, or an older
    path that does not check, leaves the members waiting for a root that never sends. The intent is usually the group's first member
    (`src=2`), or the group-local root `group_src=0`.

    ## Example
    ```python
    g = dist.new_group([2, 3])
    dist.broadcast(t, src=0, group=g)
    ```

    ## Use instead
    ```python
    g = dist.new_group([2, 3])
    dist.broadcast(t, src=2, group=g)  # or group_src=0
    ```

    ## Fix safety
    There is no automatic fix: which member is the root is the program's choice.
    """

    code = "DDP513"
    name = "root-not-in-group"
    severity = Severity.ERROR
    requires_text = ("new_group",)

    def finish(self, ctx) -> None:
        an, view = hub(ctx)
        pred = qn_pred(D + "new_group")
        for op, ((rpos, rkw), gpos) in _ROOTED.items():
            for c in ctx.calls_to(D + op):
                root, grp = get_arg(c, rpos, rkw), get_arg(c, gpos, "group")
                if root is None or grp is None:
                    continue
                r = _const_int(an, view, root, c)
                if r is None:
                    continue
                got = holds_call(an, view, grp, c, pred)
                if got is None:
                    continue
                gv, g = got
                ranks = get_arg(g, 0, "ranks")
                members = const_ints(ranks) if ranks is not None else None
                if members is None or r in members:
                    continue
                ctx.report(c, f"`{op}` uses `{rkw}={r}`, a global rank that is not in its group (ranks "
                              f"{list(members)}): `{rkw}` is global even with `group=`; use a member's rank, "
                              f"or `group_{rkw}=` for a rank within the group",
                           related=[(g, "the group is made here")] if gv is view else [])


def _const_int(an, view, expr, at):
    if isinstance(expr, ast.Constant) and type(expr.value) is int:
        return expr.value
    got = origins(an, view, expr, at)
    vals = {e.value for _, e in got if isinstance(e, ast.Constant) and type(e.value) is int}
    if got and len(vals) == 1 and all(isinstance(e, ast.Constant) for _, e in got):
        return vals.pop()
    return None
