"""Shared vocabulary for rules: collective names, backend evaluation, small constant folding."""
from __future__ import annotations

import ast

from ..context import D  # noqa: F401  (re-exported for the rules)
from ..semantic import get_arg


OBJECT_COLLECTIVES = ("all_gather_object", "gather_object", "scatter_object_list")
OBJECT_COLLECTIVES_WITH_DEVICE = ("broadcast_object_list", "send_object_list", "recv_object_list")

TENSOR_COLLECTIVES = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "_all_gather_base", "all_gather_coalesced",
    "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base", "all_to_all", "all_to_all_single",
    "broadcast", "reduce", "gather", "scatter", "all_reduce_coalesced",
)
ALL_COLLECTIVES = TENSOR_COLLECTIVES + OBJECT_COLLECTIVES + OBJECT_COLLECTIVES_WITH_DEVICE[:1] + ("barrier", "monitored_barrier")

DDP_CLASS = "torch.nn.parallel.DistributedDataParallel"


def qualify(*short: str) -> tuple[str, ...]:
    return tuple(D + s for s in short)


def const_str(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def const_int(node: ast.AST | None) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def backend_mentions_nccl(expr: ast.AST | None, ctx, scope: ast.AST, depth: int = 0) -> bool:
    """True when the backend expression is (or may be, in an if-expression) NCCL: a literal
    "nccl", a "cpu:gloo,cuda:nccl" string, ``dist.Backend.NCCL``, or a name bound once to one."""
    if expr is None or depth > 4:
        return False
    s = const_str(expr)
    if s is not None:
        parts = [p.split(":")[-1].strip().lower() for p in s.split(",")]
        return "nccl" in parts
    if isinstance(expr, ast.IfExp):
        return backend_mentions_nccl(expr.body, ctx, scope, depth + 1) or backend_mentions_nccl(
            expr.orelse, ctx, scope, depth + 1)
    if isinstance(expr, ast.Attribute):
        qn = ctx.qn(expr)
        if qn and qn.lower() in ("torch.distributed.backend.nccl",):
            return True
        return False
    if isinstance(expr, ast.Name):
        val = ctx.sem.single_value(expr.id, scope)
        return backend_mentions_nccl(val, ctx, ctx.sem.tree if val is not None and ctx.sem.scope_of(val) is ctx.sem.tree else scope, depth + 1)
    return False


def init_backend_is_nccl(init: ast.Call, ctx) -> bool:
    return backend_mentions_nccl(get_arg(init, 0, "backend"), ctx, ctx.sem.scope_of(init))


def is_simple_ref(node: ast.AST) -> bool:
    """A name, attribute chain or constant subscript: safe to repeat in generated code."""
    while True:
        if isinstance(node, ast.Name):
            return True
        if isinstance(node, ast.Attribute):
            node = node.value
            continue
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            node = node.value
            continue
        return False


def fixed_world_size(ctx) -> int | None:
    """A world size the file fixes by constant (init_process_group(world_size=2), mp.spawn(...,
    nprocs=2), a `world_size` property or module constant), if exactly one is stated; cached per
    check."""
    return ctx.memo("common.fixed_world_size", lambda: _fixed_world_size(ctx))


def _fixed_world_size(ctx) -> int | None:
    sizes = set()
    for c in ctx.calls_to(D + "init_process_group"):
        n = const_int(get_arg(c, None, "world_size"))
        if n is not None:
            sizes.add(n)
    for c in ctx.calls_to("torch.multiprocessing.spawn", "torch.multiprocessing.start_processes"):
        n = const_int(get_arg(c, None, "nprocs"))
        if n is not None:
            sizes.add(n)
    # ``def world_size(self): return 2`` (a multi-process test case) or ``WORLD_SIZE = 2``
    for fn in ctx.sem.functions.get("world_size", ()):
        if fn.body and isinstance(fn.body[-1], ast.Return):
            n = const_int(fn.body[-1].value)
            if n is not None:
                sizes.add(n)
    for name in ("world_size", "WORLD_SIZE", "NUM_PROCS", "nprocs", "NPROCS"):
        val = ctx.sem.single_value(name, ctx.sem.tree)
        n = const_int(val)
        if n is not None:
            sizes.add(n)
    return sizes.pop() if len(sizes) == 1 else None
