"""Where only the main rank goes on: ``if local_rank != 0: sys.exit()`` or ``assert rank == 0``
right after (or before) a statement (``others_exit_after``, on ``rank_tests.polarity``). DDP001
reads it: past such a test one process per node (per job, for the global rank) is left, and cuda:0
is its device."""
from __future__ import annotations

import ast

from ..semantic import parent
from .rank_tests import polarity


_PROCESS_EXITS = frozenset({"sys.exit", "os._exit", "exit", "quit", "builtins.exit"})


def others_exit_after(ctx, node: ast.AST):
    """The first ``if <test>: ...; sys.exit()`` after ``node``'s statement in its function (in its
    block or an enclosing one) whose test lets only the non-main ranks in (``polarity`` False:
    ``if local_rank != 0: exit()``), or ``assert <test>`` whose test only the main rank passes
    (``assert os.environ["LOCAL_RANK"] == "0"``, also before ``node``: then nothing after it is
    shared): past it only the main rank (one per node, for a local rank) runs on. None when there
    is none."""
    scope = ctx.sem.scope_of(node)
    st = node
    while st is not None and st is not scope:
        p = parent(st)
        if isinstance(st, ast.stmt):
            for field in ("body", "orelse", "finalbody"):
                block = getattr(p, field, None)
                if isinstance(block, list) and st in block:
                    i = block.index(st)
                    for nxt in (*block[i + 1:], *block[:i]):
                        if isinstance(nxt, ast.If) and nxt.lineno > node.lineno and _exits_process(ctx, nxt.body) \
                                and polarity(ctx, nxt.test, scope) is False:
                            return nxt
                        if isinstance(nxt, ast.Assert) and polarity(ctx, nxt.test, scope) is True:
                            return nxt
                    break
        st = p
    return None


def _exits_process(ctx, body) -> bool:
    last = body[-1] if body else None
    if not (isinstance(last, ast.Expr) and isinstance(last.value, ast.Call)):
        return False
    f = last.value.func
    return (ctx.qn(last.value) or (f.id if isinstance(f, ast.Name) else "")) in _PROCESS_EXITS
