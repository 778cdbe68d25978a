"""The process rank by value flow, whatever a variable's name: a name every assignment of which is a
rank call or the constant 0 (one process is rank 0), and ``self.<attr>`` filled from a constructor
parameter that every construction passes such a value. ``rank_tests.polarity`` asks it before it
reads names."""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, get_arg, parent
from ..torch_api import D
from .assignments import name_binding_kind, self_attr_value
from .rank_tests import _int_const, is_rank_like


def rank_value(ctx, e: ast.AST, scope: ast.AST, depth: int = 0) -> ast.AST:
    """``e``'s rank call when ``e`` is a name not read as a rank whose every assignment is a rank
    call (``dist.get_rank()``) or the constant 0, one of them a call (``r = 0``, then ``r =
    dist.get_rank()`` under ``if world_size > 1:``: one process is rank 0), or ``self.<attr>`` bound
    once to a constructor parameter that every construction here fills so: value flow before name."""
    if isinstance(e, ast.Name) and not is_rank_like(e) and depth < 4:
        kind, vals = name_binding_kind(ctx, e.id, scope)
        vals = [vals] if kind == "single" else vals if kind == "multi" and vals else []
        calls = [v for v in vals if isinstance(v, ast.Call) and is_rank_like(v)]
        if calls and all(v in calls or _int_const(v) == 0 for v in vals):
            return calls[0]
        if kind == "param" and isinstance(scope, FUNC_TYPES) and scope.name == "__init__" \
                and not ctx.sem.assignments(scope).get(e.id):
            from .helper_calls import bind_args, calls_named

            cls = parent(scope)
            sites = calls_named(ctx, cls.name) if isinstance(cls, ast.ClassDef) else []
            got = [rank_value(ctx, a, ctx.sem.scope_of(a), depth + 1) if a is not None else None
                   for a in (bind_args(c, scope).get(e.id) for c in sites)]
            if got and all(isinstance(g, ast.Call) and is_rank_like(g) for g in got):
                return got[0]
    elif isinstance(e, ast.Attribute) and not is_rank_like(e) and isinstance(v := self_attr_value(ctx, e), ast.Name):
        got = rank_value(ctx, v, ctx.sem.scope_of(v), depth + 1)
        return got if isinstance(got, ast.Call) and is_rank_like(got) else e
    return e


def configured_option(sem, e: ast.Attribute) -> bool:
    """``args.<attr>`` is the destination of this module's argparse options only, each with a
    numeric default other than 0 and -1 (``--rank`` with ``default=4``: a dimension, a count), and
    nothing else stores to ``<x>.<attr>``: configuration, the same on every rank, whatever its
    name. A process rank's default is the run without a launcher (0) or "not distributed" (-1)."""
    from .rank_kinds import LOCAL_RANK_OPTIONS, argparse_options, option_dest, option_strings  # lazy: above us

    opts = [c for c in argparse_options(sem) if option_dest(c, sem) == e.attr]
    if not opts or any(LOCAL_RANK_OPTIONS & set(option_strings(c)) for c in opts):
        return False
    for c in opts:
        d = get_arg(c, None, "default")
        if d is None or _int_const(d) in (None, 0, -1):
            return False
    return not any(isinstance(t, ast.Attribute) and t.attr == e.attr
                   for st in sem.by_type.get(ast.Assign, ()) for t in st.targets)


def local_group_rank(hub, view, depth: int = 0) -> bool:
    """Every ``init_process_group`` of the module gives ``rank=`` the local rank
    (``rank=int(os.environ["LOCAL_RANK"])``): ``dist.get_rank()`` then returns the local rank, and
    the one mistake is the init's (DDP007), not each later use of ``get_rank()``."""
    from .rank_kinds import LOCAL, rank_kind_of  # lazy: rank_kinds asks this module

    memo = view.memo.setdefault("rank_values.local_group", {})
    if depth in memo:
        return memo[depth]
    memo[depth] = False  # recursion guard
    inits = view.sem.calls_to(D + "init_process_group")
    memo[depth] = got = bool(inits) and all(
        (r := get_arg(c, 4, "rank")) is not None and rank_kind_of(hub, view, r, c, depth + 1)[0] == LOCAL
        for c in inits)
    return got
