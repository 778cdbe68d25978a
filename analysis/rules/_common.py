"""Shared vocabulary for rules: collective names, backend evaluation, small constant folding."""
from __future__ import annotations

import ast

from ..semantic import get_arg
from ..torch_api import (  # noqa: F401  (the torch vocabulary, shared with the runtime)
    ALL_COLLECTIVES,
    DDP_CLASS,
    OBJECT_COLLECTIVES,
    OBJECT_COLLECTIVES_WITH_DEVICE,
    TENSOR_COLLECTIVES,
    D,
    backend_mentions_nccl,
    const_int,
    const_str,
    qualify,
)


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


def gloo_only(ctx, init: ast.Call) -> bool:
    """The group's backend is the literal "gloo" (every device part) or ``dist.Backend.GLOO``."""
    expr = get_arg(init, 0, "backend")
    if isinstance(expr, ast.Name):
        expr = ctx.sem.single_value(expr.id, ctx.sem.scope_of(init))
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        parts = [p.split(":")[-1].strip().lower() for p in expr.value.split(",")]
        return all(p == "gloo" for p in parts)
    if isinstance(expr, ast.Attribute):
        return (ctx.qn(expr) or "").lower() == "torch.distributed.backend.gloo"
    return False
