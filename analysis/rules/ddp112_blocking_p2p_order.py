from __future__ import annotations

import ast
import re

from ..model import Applicability, Severity
from ..registry import Rule
from ..semantic import FUNC_TYPES, get_arg, param_names, parent
from ..flow.assignments import name_binding_kind
from ..flow.rank_tests import rank_kind
from ._common import D


_PEER_NAME = re.compile(r"rank|peer|neighbo|left|right|prev|next|dst|src|partner", re.I)


class BlockingP2pOrder(Rule):
    """
    ## What it does
    Checks for a blocking `dist.send(...)` followed by a blocking `dist.recv(...)` that every rank
    runs in the same order (no rank test around either) with peers computed from the rank
    (directly, or through a name assigned once from it: `other = 1 - rank`): the symmetric
    exchange of a ring, a halo or a pair swap, `send` to the next rank and then `recv` from the
    previous one.

    A `send`/`recv` pair under any condition (parity ordering: even ranks send first, odd ranks
    receive first), non-blocking `isend`/`irecv`, and `batch_isend_irecv` are not flagged, nor are
    peers that are constants.

    ## Why is this bad?
    A blocking `send` of a message larger than the transport buffers returns only once the peer
    has posted the matching `recv`. When every rank sends first, every rank waits for a peer that
    is itself stuck in `send`: nobody reaches `recv`. Small messages hide it (Gloo's socket
    buffers; with NCCL, the send and the recv of one peer pair are queued on one stream, as in any
    two-rank exchange), so the script passes its tests and then hangs, with no error, as soon as a
    tensor grows, until the collective timeout kills the job. Whether a given size hangs depends on
    the backend and its version; the order is wrong regardless.

    ## Example
    ```python
    right = (rank + 1) % world_size
    left = (rank - 1) % world_size
    dist.send(send_buf, dst=right)
    dist.recv(recv_buf, src=left)
    ```

    ## Use instead
    ```python
    ops = [dist.P2POp(dist.isend, send_buf, right), dist.P2POp(dist.irecv, recv_buf, left)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    ```

    or order by parity (`if rank % 2 == 0: send, recv` / `else: recv, send`).

    ## Fix safety
    When the `send` and the `recv` are statements of the same block, the fix turns the `send`
    into `send_req = dist.isend(...)` and waits for it right after the `recv`. It is **unsafe**: the
    send buffer must not be modified between the two, which the fix cannot check.
    """

    code = "DDP112"
    name = "blocking-p2p-order"
    severity = Severity.WARNING
    fix_availability = "sometimes"
    requires_text = ("recv",)

    def finish(self, ctx) -> None:
        sends = ctx.calls_to(D + "send")
        recvs = ctx.calls_to(D + "recv")
        if not sends or not recvs:
            return
        sem = ctx.sem
        for s in sends:
            fn = sem.scope_of(s)
            if not isinstance(fn, FUNC_TYPES) or _conditional(sem, s, fn):
                continue
            peer = get_arg(s, 1, "dst")
            if not _rank_peer(ctx, peer, fn):
                continue
            st = sem.statement_of(s)
            r = next((r for r in recvs if sem.scope_of(r) is fn and r.lineno > s.end_lineno
                      and not _conditional(sem, r, fn) and _rank_peer(ctx, get_arg(r, 1, "src"), fn)
                      and _same_loop(sem, s, r)), None)
            if r is None:
                continue
            ctx.report(
                s,
                f"every rank runs this blocking `send` before the blocking `recv` on line {r.lineno}: in a "
                "symmetric exchange each rank waits in `send` for a peer that is itself sending, a deadlock "
                "once the message exceeds the transport's buffer. Use `isend`/`irecv`, "
                "`batch_isend_irecv`, or order by rank parity",
                related=[(r, "the matching `recv` is only reached after the `send` completes")],
                fix=_make_fix(ctx, s, st, r, fn),
            )


def _conditional(sem, node, fn) -> bool:
    for a in sem.ancestors(node):
        if a is fn:
            return False
        if isinstance(a, (ast.If, ast.IfExp, ast.Try, ast.While, ast.match_case)):
            return True
    return False


def _same_loop(sem, a, b) -> bool:
    la = next((x for x in sem.ancestors(a) if isinstance(x, (ast.For, ast.AsyncFor))), None)
    lb = next((x for x in sem.ancestors(b) if isinstance(x, (ast.For, ast.AsyncFor))), None)
    return la is lb


def _rank_peer(ctx, e, fn, depth: int = 0) -> bool:
    """The peer depends on the rank (not a constant): directly, or through a name assigned once
    from an expression of the rank (``other = 1 - rank``)."""
    if e is None or isinstance(e, ast.Constant) or depth > 3:
        return False
    for n in ast.walk(e):
        if isinstance(n, (ast.Name, ast.Call, ast.Attribute)) and rank_kind(ctx, n, fn):
            return True
        if isinstance(n, ast.Name) and _PEER_NAME.search(n.id):
            return True
        if isinstance(n, ast.Name):
            kind, val = name_binding_kind(ctx, n.id, fn)
            if kind == "single" and val is not None and _rank_peer(ctx, val, fn, depth + 1):
                return True
    return False


def _make_fix(ctx, s, st, r, fn):
    if not isinstance(st, ast.Expr) or st.value is not s:
        return None
    rst = ctx.sem.statement_of(r)
    if parent(rst) is not parent(st) or not isinstance(s.func, ast.Attribute):
        return None
    taken = set(ctx.sem.assignments(fn)) | set(param_names(fn))
    name = "send_req"
    i = 2
    while name in taken:
        name = f"send_req{i}"
        i += 1
    func = ctx.text(s.func)
    new_func = func[: -len("send")] + "isend"
    after = ctx.insert_after(rst, f"{name}.wait()")
    if after is None or not ctx.stmt_starts_line(st):
        return None
    return ctx.fix(Applicability.UNSAFE, f"Send without blocking: `{name} = {new_func}(...)`, wait after the `recv`",
                   [ctx.replace(s, f"{name} = {new_func}{ctx.text(s)[len(func):]}"), after])
