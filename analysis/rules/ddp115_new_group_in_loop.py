from __future__ import annotations

import ast
import os

from ..model import Severity
from ..registry import Rule
from ..semantic import FUNC_TYPES, parent
from ._common import D

_NEW = (D + "new_group", D + "new_subgroups", D + "new_subgroups_by_enumeration")
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_SCOPES = (*FUNC_TYPES, ast.Lambda, ast.ClassDef, ast.Module)


class NewGroupInLoop(Rule):
    """
    ## What it does
    Checks for `dist.new_group(...)` (or `new_subgroups`) whose group lives for one iteration of a
    loop, or one call of a function that a loop calls, and is never destroyed: the result is used
    there (`all_reduce(t, group=g)`) and goes nowhere else: not returned, not stored in a list, a
    dict, an attribute or a global, not passed to `destroy_process_group(g)`.

    A loop that builds the groups once (`for ranks in layout: g = new_group(ranks); if rank in
    ranks: self.group = g`) keeps each group and is not flagged. Helpers are followed: a function
    of this file or of another module of the project whose group does not escape it is flagged at
    its call inside a loop (or at its `new_group` when the function is in this file).

    ## Why is this bad?
    Each `new_group` call is itself a collective over the default group (every rank must call it,
    in the same order) and creates a new communicator (an NCCL communicator holds GPU memory and
    network resources) that lives until the process exits. One per step or epoch leaks them until
    the job runs out of memory or file descriptors:

    ```
    torch.distributed.DistBackendError: NCCL error ... unhandled system error ... Cuda failure 'out of memory'
    ```

    and every iteration pays the communicator's set-up time.

    ## Example
    ```python
    for batch in loader:
        group = dist.new_group(ranks=[0, 1])
        dist.all_reduce(loss, group=group)
    ```

    ## Use instead
    ```python
    group = dist.new_group(ranks=[0, 1])  # once
    for batch in loader:
        dist.all_reduce(loss, group=group)
    ```

    ## Fix safety
    There is no fix: hoisting the call changes when the collective runs, and only the program
    knows whether the ranks of the group change between iterations.
    """

    code = "DDP115"
    name = "new-group-in-loop"
    severity = Severity.WARNING
    requires_text = ("new_group", "new_subgroups")

    def finish(self, ctx) -> None:
        sem = ctx.sem
        reported = set()
        for call in ctx.calls_to(*_NEW):
            if not _local_group(sem, call):
                continue
            loop = _enclosing_loop(call)
            if loop is not None:
                reported.add(id(call))
                ctx.report(call, _msg(ctx, call, "in a loop"),
                           related=[(loop, "the loop")])
                continue
            fn = sem.enclosing_function(call)
            if fn is None or _escapes_return(fn):
                continue
            site = next((c for c in _call_sites(ctx, fn) if _enclosing_loop(c) is not None), None)
            if site is not None:
                ctx.report(call, _msg(ctx, call, f"in `{fn.name}()`, which a loop calls (line {site.lineno})"),
                           related=[(site, "called in a loop")])
        self._through_helpers(ctx)

    def _through_helpers(self, ctx) -> None:
        """A call, in a loop, of a project function of another module whose group does not escape it."""
        from ..flow import for_context
        from ..flow.helper_calls import may_resolve
        from ..flow.findings import node_span

        an = None
        for call in ctx.sem.calls:
            if _enclosing_loop(call) is None or (ctx.qn(call) or "").startswith("torch."):
                continue
            if an is None:
                an = for_context(ctx)
            if not may_resolve(an.main, call):
                continue
            target = an.resolve_call(an.main, call)
            if target is None or target[0] is an.main:
                continue
            view, fn = target
            got = _helper_group(view, fn)
            if got is None:
                continue
            rng = node_span(ctx, view.path, got)
            ctx.report(
                call,
                f"`{ctx.text(call.func)}()` runs in a loop, and `{ctx.text(call.func)}` creates a process group "
                f"({os.path.basename(view.path or '')} line {got.lineno}) that it never keeps nor destroys: one "
                "communicator leaks per iteration; create the group once, outside the loop",
                related=[("file", view.path, rng, "the new group")] if view.path else (),
            )


def _msg(ctx, call, where) -> str:
    return (f"`{ctx.text(call.func)}(...)` {where} creates a new communicator on every iteration and nothing "
            "keeps or destroys it: communicators leak, and each call is a collective over the default group; "
            "create the group once, outside the loop")


def _enclosing_loop(node):
    child, p = node, parent(node)
    while p is not None and not isinstance(p, _SCOPES):
        if isinstance(p, _LOOPS) and child is not getattr(p, "iter", None) and child is not getattr(p, "test", None):
            return p
        child, p = p, parent(p)
    return None


def _local_group(sem, call) -> bool:
    """The group ``call`` creates is used in its function only, and never kept nor destroyed:
    bound to a plain local name (or used inline as an argument) whose every use is an argument of
    a ``torch.distributed`` call other than ``destroy_process_group`` (a collective on it)."""
    st = parent(call)
    if isinstance(st, ast.keyword):
        return _collective_use(sem, parent(st))
    if not (isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)):
        return False
    name = st.targets[0].id
    scope = sem.scope_of(call)
    if isinstance(scope, ast.Module):
        return False
    if any(isinstance(n, (ast.Global, ast.Nonlocal)) and name in n.names for n in ast.walk(scope)):
        return False
    uses = [n for n in ast.walk(scope) if isinstance(n, ast.Name) and n.id == name and n is not st.targets[0]]
    if not uses:
        return False
    for u in uses:
        if isinstance(u.ctx, ast.Store):
            return False
        p = parent(u)
        if isinstance(p, ast.keyword):
            p = parent(p)
        if not isinstance(p, ast.Call) or u is p.func or not _collective_use(sem, p):
            return False
    return True


def _collective_use(sem, call) -> bool:
    """``call`` is a ``torch.distributed`` call that uses a group without keeping it (a collective,
    ``get_rank(group)``): not ``destroy_process_group``, not a helper that may store it."""
    qn = sem.call_qualname(call) or "" if isinstance(call, ast.Call) else ""
    return qn.startswith(D) and qn != D + "destroy_process_group" and qn not in _NEW


def _escapes_return(fn) -> bool:
    return any(isinstance(n, (ast.Return, ast.Yield, ast.YieldFrom)) and n.value is not None
               for n in ast.walk(fn))


def _call_sites(ctx, fn) -> list:
    cls = parent(fn)
    out = []
    for c in ctx.sem.calls:
        f = c.func
        if isinstance(cls, ast.ClassDef):
            if isinstance(f, ast.Attribute) and f.attr == fn.name and isinstance(f.value, ast.Name) \
                    and f.value.id == "self":
                out.append(c)
        elif isinstance(f, ast.Name) and f.id == fn.name:
            out.append(c)
    return out


def _helper_group(view, fn):
    """The ``new_group`` call of ``fn`` (another module) whose group stays local to it, or None."""
    if not isinstance(fn, FUNC_TYPES) or _escapes_return(fn):
        return None
    sem = view.sem
    for c in sem.scope_calls(fn):
        if (sem.call_qualname(c) or "") in _NEW and _local_group(sem, c):
            return c
    return None
