"""The DDP model of a file: is it a distributed script, where is the DDP wrapper built, and which
name (or ``self.`` attribute) holds it at a given point.

Local dataflow in one scope (plus module level), over the semantic indexes.
"""
from __future__ import annotations

import ast

from ..semantic import parent
from ..torch_api import DDP_CLASS, SPAWNS
from .assignments import reaching_assignment

_LAUNCH = ("torch.distributed.init_process_group", DDP_CLASS, *SPAWNS,
           "torch.distributed.fsdp.FullyShardedDataParallel", "torch.distributed.fsdp.fully_shard",
           "torch.distributed._composable.fsdp.fully_shard", "torch.distributed.device_mesh.init_device_mesh")
# what a file must spell for is_distributed_script to hold (the last component of each launch call)
LAUNCH_TEXT = tuple(dict.fromkeys(q.rsplit(".", 1)[1] for q in _LAUNCH))


def is_distributed_script(ctx) -> bool:
    """The file starts or joins a process group, wraps in DDP/FSDP or spawns ranks itself."""
    return ctx.memo("models.distributed_script", lambda: bool(ctx.sem.calls_to(*_LAUNCH)))


def ddp_calls(ctx) -> list[ast.Call]:
    return ctx.sem.calls_to(DDP_CLASS)


def is_ddp_wrapper(ctx, expr: ast.AST, at: ast.AST):
    """The ``X = DDP(...)`` assignment when ``expr`` (a name or ``self.attr``) holds the DDP wrapper
    at ``at``; else None."""
    if isinstance(expr, ast.Name):
        st = reaching_assignment(ctx, expr.id, at)
        if st is not None and isinstance(st.value, ast.Call) and ctx.qn(st.value) == DDP_CLASS:
            return st
        return None
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
        cls = next((a for a in ctx.sem.ancestors(expr) if isinstance(a, ast.ClassDef)), None)
        if cls is None:
            return None
        found = []
        for c in ddp_calls(ctx):
            st = parent(c)
            if isinstance(st, ast.Assign) and st.lineno >= cls.lineno and st.end_lineno <= cls.end_lineno:
                for t in st.targets:
                    if isinstance(t, ast.Attribute) and t.attr == expr.attr and isinstance(t.value, ast.Name) \
                            and t.value.id == "self":
                        found.append(st)
        if len(found) == 1 and not _other_self_assigns(ctx, cls, expr.attr, found[0]):
            return found[0]
    return None


def _other_self_assigns(ctx, cls: ast.ClassDef, attr: str, keep: ast.stmt) -> bool:
    # assignments() only indexes plain names; look at the class's statements directly (bounded)
    for st in _class_assign_stmts(cls):
        if st is keep:
            continue
        targets = st.targets if isinstance(st, ast.Assign) else [st.target]
        for t in targets:
            if isinstance(t, ast.Attribute) and t.attr == attr:
                return True
    return False


def _class_assign_stmts(cls: ast.ClassDef):
    stack = list(cls.body)
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            yield n
        for f in ("body", "orelse", "finalbody", "handlers"):
            v = getattr(n, f, None)
            if isinstance(v, list):
                stack.extend(x for x in v if isinstance(x, ast.AST))
