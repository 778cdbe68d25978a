from __future__ import annotations

import ast

from ..model import Applicability, Severity
from ..registry import Rule
from ..semantic import parent
from ..torch_api import constant_of
from ._common import ALL_COLLECTIVES, D
from ..flow.modern import hub, key_of, uses_after
from ..flow.origins import helper_results
from ..flow.sync import completed_by_barrier

_P2P = ("isend", "irecv")
_ASYNC_OPS = frozenset((*ALL_COLLECTIVES, *_P2P))


class AsyncWorkNotWaited(Rule):
    """
    ## What it does
    Checks for a collective called with `async_op=True` whose work handle is dropped: the call is
    a statement of its own, or the handle is bound to a name that nothing reads (no `.wait()`,
    not returned, stored or passed on). Also `dist.isend` / `dist.irecv` handles.

    A dropped collective handle followed by a blocking `dist.barrier()` of the same group, before
    anything reads its tensors (they may be put in a list), is not flagged: a group runs its
    collectives in order and the barrier returns after the earlier ones ended. Point-to-point
    handles are not ordered that way and are always flagged.

    ## Why is this bad?
    With `async_op=True` the call returns before the collective has finished. Reading or writing
    the tensor before `work.wait()` races with the communication: the result is the local value,
    a partial reduction, or garbage, and nothing raises. On NCCL the tensor may also be freed
    while the kernel still uses it.

    ## Example
    ```python
    dist.all_reduce(grad, async_op=True)
    grad /= world_size
    ```

    ## Use instead
    ```python
    work = dist.all_reduce(grad, async_op=True)
    ...  # overlap other work
    work.wait()
    grad /= world_size
    ```

    ## Fix safety
    For a collective the fix removes `async_op=True`, making the call blocking. It is safe: the
    dropped handle could not be waited, and the blocking call gives the result the code reads.
    """

    code = "DDP512"
    name = "async-work-not-waited"
    severity = Severity.ERROR
    fix_availability = "sometimes"
    requires_text = ("async_op", "isend", "irecv")

    def finish(self, ctx) -> None:
        an, view = hub(ctx)
        calls = ctx.calls_to(*(D + n for n in (*ALL_COLLECTIVES, *_P2P)))
        # and the calls of project helpers that return such a work handle (``return dist.isend(...)``)
        found = helper_results(an, view, _is_async)
        helpers = {id(c): got for c, got in found}  # -> (the helper's view, its async call)
        for c in [*calls, *(h for h, _ in found)]:
            inner = helpers.get(id(c))
            if inner is None and not _is_async(view, c):
                continue
            op = ((inner[0].sem.call_qualname(inner[1]) or D) if inner is not None else ctx.qn(c))[len(D):]
            kw = next((k for k in c.keywords if k.arg == "async_op"), None) if inner is None else None
            p = parent(c)
            if isinstance(p, ast.Expr):
                if inner is None and op not in _P2P and completed_by_barrier(view.sem, c, op) is not None:
                    continue  # a blocking barrier of the same group ends it before the tensor is read
                dropped = "is dropped"
            elif isinstance(p, ast.Assign) and len(p.targets) == 1 and key_of(p.targets[0]) is not None \
                    and not uses_after(view.sem, key_of(p.targets[0]), p):
                dropped = f"is bound to `{key_of(p.targets[0])}`, which nothing reads"
            else:
                continue
            fix = None
            if kw is not None and isinstance(p, ast.Expr):
                fix = ctx.fix(Applicability.SAFE, "Make the call blocking (remove `async_op=True`)",
                              [_remove_keyword(ctx, c, kw)])
            ctx.report(c, f"the work handle of `{ctx.text(c)}` {dropped}: nothing waits for the "
                          f"{'transfer' if op in _P2P else 'collective'}, so the tensor is used before it ends",
                       fix=fix)


def _is_async(view, c) -> bool:
    """``c`` returns a work handle: a point-to-point ``isend``/``irecv``, or a collective with
    ``async_op=True`` (a literal, or a value that resolves to it)."""
    qn = view.sem.call_qualname(c) or ""
    if not qn.startswith(D) or qn[len(D):] not in _ASYNC_OPS:
        return False
    if qn[len(D):] in _P2P:
        return True
    kw = next((k for k in c.keywords if k.arg == "async_op"), None)
    return kw is not None and _is_true(constant_of(view.sem, kw.value))


def _is_true(c) -> bool:
    return isinstance(c, ast.Constant) and c.value is True


def _remove_keyword(ctx, call, kw):
    """An edit removing ``, async_op=True`` (with the comma before it, or after it when first)."""
    src = ctx.src
    items = [*call.args, *call.keywords]
    i = next(j for j, x in enumerate(items) if x is kw)
    from ..model import Edit, Range
    kr = src.node_range(kw)
    if i > 0:
        prev = src.node_range(items[i - 1])
        return Edit(Range(prev.end, kr.end), "")
    if len(items) > 1:
        nxt = src.node_range(items[1])
        return Edit(Range(kr.start, nxt.start), "")
    return Edit(kr, "")
