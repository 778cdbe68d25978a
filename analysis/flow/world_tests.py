"""Tests on the world's size by value flow, never by name: ``world_size_source(expr)`` is the
``dist.get_world_size()`` / ``os.environ["WORLD_SIZE"]`` expression ``expr`` provably is, and
``single_world_test(test)`` reads ``world_size == 1`` (True: one process, the main rank) and
``world_size > 1`` (False). ``rank_tests.polarity`` reads them as main-rank tests."""
from __future__ import annotations

import ast

from ..semantic import iter_scope_nodes, param_names, parent
from ..torch_api import D
from .assignments import name_binding_kind
from .vocab import env_key
from .world import WORLD_SIZE_ENV, world_size_call


def _unwrap_int(expr: ast.AST) -> ast.AST:
    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "int" \
            and len(expr.args) == 1 and not expr.keywords:
        expr = expr.args[0]
    return expr


def _int_const(e: ast.AST) -> int | None:
    if isinstance(e, ast.Constant) and isinstance(e.value, str) and e.value.lstrip("-").isdigit():
        return int(e.value)  # os.environ.get("RANK", "0") == "0"
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
        v = _int_const(e.operand)
        return -v if v is not None else None
    if isinstance(e, ast.Constant) and type(e.value) is int:
        return e.value
    return None


def world_size_source(ctx, expr: ast.AST, scope: ast.AST, depth: int = 0) -> ast.AST | None:
    """The ``dist.get_world_size()`` / ``os.environ["WORLD_SIZE"]`` expression that ``expr``
    provably is (through ``int(...)``, names assigned exactly once, ``... if
    dist.is_initialized() else 1`` or such an ``if``), else None. By value flow, never by name:
    ``get_world_size(group)`` is a group's size, not the world's."""
    if depth > 5:
        return None
    expr = _unwrap_int(expr)
    # ``os.environ["WORLD_SIZE"]``, ``os.environ.get("WORLD_SIZE", 1)``, ``os.getenv("WORLD_SIZE")``
    key = env_key(ctx, expr)
    if key is not None:
        return expr if key in WORLD_SIZE_ENV else None
    if isinstance(expr, ast.Call):
        if world_size_call(ctx.sem, expr):
            return expr
        # ``world_size = get_world()`` with ``def get_world(): return int(os.environ["WORLD_SIZE"])``
        # in this module (one definition, one final ``return``, no parameters)
        f = expr.func
        defs = ctx.sem.functions.get(f.id) if isinstance(f, ast.Name) and not expr.args else None
        if defs and len(defs) == 1 and defs[0].body and isinstance(defs[0].body[-1], ast.Return) \
                and defs[0].body[-1].value is not None and not param_names(defs[0]) \
                and sum(isinstance(n, ast.Return) for n in iter_scope_nodes(defs[0])) == 1:
            return world_size_source(ctx, defs[0].body[-1].value, defs[0], depth + 1)
        return None
    if isinstance(expr, ast.IfExp):
        return _group_or_one(ctx, expr.test, expr.body, expr.orelse, scope, depth)
    if isinstance(expr, ast.Name):
        kind, val = name_binding_kind(ctx, expr.id, scope)
        if kind == "single" and val is not None:
            return world_size_source(ctx, val, ctx.sem.scope_of(val), depth + 1)
        if kind == "multi" and val and len(val) == 2 and isinstance(q := parent(parent(val[0])), ast.If) \
                and parent(val[0]) in q.body and parent(val[1]) in q.orelse:
            return _group_or_one(ctx, q.test, val[0], val[1], ctx.sem.scope_of(q), depth)
    return None


def _group_or_one(ctx, test, ws, one, scope, depth):
    """``dist.get_world_size() if dist.is_initialized() else 1`` (or the two branches of such an
    ``if``): the world's size, one process without a group."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, ws, one = test.operand, one, ws
    if _int_const(one) == 1 and isinstance(test, ast.Call) and not test.args \
            and ctx.sem.call_qualname(test) in (D + "is_initialized", D + "is_available"):
        return world_size_source(ctx, ws, scope, depth + 1)
    return None


def single_world_test(ctx, test: ast.Compare, scope: ast.AST) -> bool | None:
    """``world_size == 1`` / ``<= 1`` / ``< 2``: True (when it holds there is one process, the main
    rank); ``!= 1`` / ``> 1`` / ``>= 2``: False (when it fails there is one process); else None."""
    return world_compare(test, lambda e: world_size_source(ctx, e, scope) is not None)


def world_compare(test: ast.Compare, is_world) -> bool | None:
    """``single_world_test`` with ``is_world(expr)`` the question "is this the world's size"."""
    left, op, right = test.left, test.ops[0], test.comparators[0]
    if _int_const(left) is not None and _int_const(right) is None:
        left, right = right, left
        op = {ast.Lt: ast.Gt(), ast.Gt: ast.Lt(), ast.LtE: ast.GtE(), ast.GtE: ast.LtE()}.get(type(op), op)
    k = _int_const(right)
    if k is None or not is_world(left):
        return None
    t = type(op)
    if (t is ast.Eq and k == 1) or (t is ast.LtE and k == 1) or (t is ast.Lt and k == 2):
        return True
    if (t is ast.NotEq and k == 1) or (t is ast.Gt and k == 1) or (t is ast.GtE and k == 2):
        return False
    return None
