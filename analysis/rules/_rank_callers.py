"""The project's other modules, seen from a rule of the rank family (DDP006, DDP009): a caller's
module as a minimal view for the ``flow/rank_kinds`` queries (``int_uses``, ``option_uses``,
``local_rank_env_reads``), and the modules that call the functions which declare an option."""
from __future__ import annotations

import ast

from ..semantic import parent


class CallerView:
    """What the ``flow/rank_kinds`` module queries read of a module (``sem``, ``tree``, a memo),
    plus its path and text for related locations, over a caller's read-only rule context."""

    def __init__(self, caller):
        self.sem = caller.sem
        self.tree = caller.sem.tree
        self.memo: dict = {}
        self.path = caller.filename
        self.text = caller.src.text


def caller_view(an, caller) -> CallerView:
    """One ``CallerView`` per caller module and check (kept on the check's flow analysis)."""
    memo = an.__dict__.setdefault("_rank_caller_views", {})
    got = memo.get(id(caller.sem))
    if got is None or got.sem is not caller.sem:
        got = memo[id(caller.sem)] = CallerView(caller)
    return got


def declaring_functions(sem, node: ast.AST) -> set[str]:
    """The module-level functions of ``sem``'s module that run ``node``: the one that holds it,
    and those that call one of them by name in this module (``parse_args`` -> ``_add_dist_args``)."""
    fn = sem.enclosing_function(node)
    while fn is not None and not isinstance(parent(fn), ast.Module):
        fn = sem.enclosing_function(fn)
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return set()
    tops = {f.name: f for f in sem.tree.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
    names = {fn.name}
    grew = True
    while grew:
        grew = False
        for name, f in tops.items():
            if name in names:
                continue
            if any(isinstance(c.func, ast.Name) and c.func.id in names for c in sem.scope_calls(f)):
                names.add(name)
                grew = True
    return names


def importer_views(ctx, an, node: ast.AST) -> list:
    """``CallerView`` of each module of the project (other files) that calls a function of this
    module running ``node`` (``declaring_functions``)."""
    from ._common import project_callers  # lazy: reads the project's other files

    names = declaring_functions(ctx.sem, node)
    if not names:
        return []
    out, seen = [], set()
    for caller, _call, _fn in project_callers(ctx, names):
        v = caller_view(an, caller)
        if id(v) not in seen:
            seen.add(id(v))
            out.append(v)
    return out
