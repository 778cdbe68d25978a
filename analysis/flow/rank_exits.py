"""Where one process has cuda:0 to itself. ``others_exit_after``: only the main rank goes on past
``if local_rank != 0: sys.exit()`` or ``assert rank == 0`` right after (or before) a statement (on
``rank_tests.polarity``): one process per node (per job, for the global rank) is left.
``one_visible_device``: the code runs in a Ray task or actor that asks for at most one GPU
(``@ray.remote(num_gpus=1)``, ``ray.remote(num_gpus=1)(Worker)``, every ``Worker.options(num_gpus=1)``
of a ``@ray.remote`` class): Ray sets ``CUDA_VISIBLE_DEVICES`` to that GPU alone. DDP001 reads
both: cuda:0 is the process's own device."""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, parent
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


def one_visible_device(ctx, node: ast.AST) -> bool:
    """``node`` runs in a function (or a method of a class) that Ray starts with at most one GPU
    (see the module docstring); a ``num_gpus`` that is not a literal number is not judged."""
    p = parent(node)
    while p is not None:
        if isinstance(p, (*FUNC_TYPES, ast.ClassDef)) and _one_gpu_remote(ctx, p):
            return True
        p = parent(p)
    return False


def _gpus(ctx, call: ast.AST):
    """``ray.remote(num_gpus=n)`` / ``<x>.options(num_gpus=n)``: n, a literal number; ``...`` for a
    ``ray.remote(...)`` without it; None for anything else."""
    if not isinstance(call, ast.Call):
        return None
    if ctx.qn(call) != "ray.remote" and not (isinstance(call.func, ast.Attribute) and call.func.attr == "options"):
        return None
    v = next((k.value for k in call.keywords if k.arg == "num_gpus"), None)
    if v is None:
        return ...
    ok = isinstance(v, ast.Constant) and isinstance(v.value, (int, float)) and not isinstance(v.value, bool)
    return v.value if ok else None


def _one_gpu_remote(ctx, defn) -> bool:
    one = lambda g: g is not None and g is not ... and 0 < g <= 1  # noqa: E731
    decos = [g for d in defn.decorator_list if isinstance(d, ast.Call) and ctx.qn(d) == "ray.remote"
             for g in (_gpus(ctx, d),)]
    wraps = [g for c in ctx.sem.calls if isinstance(c.func, ast.Call) and ctx.qn(c.func) == "ray.remote"
             and any(isinstance(a, ast.Name) and a.id == defn.name for a in c.args) for g in (_gpus(ctx, c.func),)]
    if decos or wraps:
        if all(one(g) for g in decos + wraps):
            return True
        if any(g is not ... for g in decos + wraps):
            return False
    elif not any(ctx.qn(d) == "ray.remote" for d in defn.decorator_list):  # bare ``@ray.remote``
        return False
    # ``@ray.remote`` with no GPUs named: every ``<cls>.options(num_gpus=1)`` of the module decides
    opts = [_gpus(ctx, c) for c in ctx.sem.calls if isinstance(c.func, ast.Attribute) and c.func.attr == "options"
            and isinstance(c.func.value, ast.Name) and c.func.value.id == defn.name]
    return bool(opts) and all(one(g) for g in opts)
