"""How many ranks a main-rank test lets through (``ranks_admitted``): ``rank < 2`` lets ranks 0
and 1 through, ``rank == 0`` one rank (DDP202: a checkpoint written by a few ranks)."""
from __future__ import annotations

import ast

from .rank_tests import _int_const, is_rank_like, rank_kind


_NEGATED = {ast.Lt: ast.GtE, ast.GtE: ast.Lt, ast.LtE: ast.Gt, ast.Gt: ast.LtE, ast.Eq: ast.NotEq,
            ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In}
_MIRROR = {ast.Lt: ast.Gt, ast.Gt: ast.Lt, ast.LtE: ast.GtE, ast.GtE: ast.LtE}
ONE, SEVERAL = "one", "several"


def ranks_admitted(ctx, test: ast.AST, scope: ast.AST, holds: bool = True, depth: int = 0):
    """How many ranks get through ``test`` when it evaluates to ``holds``, read from its comparisons
    of a rank (``is_rank_like``, by value flow through names bound once) with integer constants:
    (``ONE`` or ``SEVERAL``, the ranks that pass, e.g. ``"ranks 0 and 1"``, the comparison that
    decides), or None when the test does not say (no rank comparison, a rank compared with a variable).

    ``not (rank > 1)`` and ``rank < 2`` let ranks 0 and 1 through; ``rank in (0, 1)`` too;
    ``rank == 0``, ``rank < 1`` and ``rank <= 0`` one rank. A conjunction lets through what its
    tightest rank comparison does, a disjunction what its loosest does; tests on anything else
    (``dist.is_initialized()``, a flag) are left out of both (``not dist.is_initialized() or
    rank <= 1`` still lets ranks 0 and 1 of a distributed job through)."""
    if depth > 6:
        return None
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return ranks_admitted(ctx, test.operand, scope, not holds, depth + 1)
    if isinstance(test, ast.BoolOp):
        subs = [r for r in (ranks_admitted(ctx, v, scope, holds, depth + 1) for v in test.values) if r is not None]
        if not subs:
            return None
        conj = isinstance(test.op, ast.And) == holds  # De Morgan
        pick = ONE if conj else SEVERAL
        return next((r for r in subs if r[0] == pick), subs[0])
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, op, right = test.left, type(test.ops[0]), test.comparators[0]

        def ranky(e):  # the value flow's answer first (``rank_kind``), the name after
            return not isinstance(e, ast.BinOp) and (rank_kind(ctx, e, scope) is not None or is_rank_like(e))
        if not ranky(left) and ranky(right):
            left, right, op = right, left, _MIRROR.get(op, op)
        if not ranky(left):
            return None
        if not holds:
            op = _NEGATED.get(op)
        if op in (ast.In, ast.NotIn):
            if op is ast.NotIn or not isinstance(right, (ast.List, ast.Tuple, ast.Set)):
                return None
            consts = [_int_const(e) for e in right.elts]
            vals = sorted({v for v in consts if v is not None and v >= 0})  # -1: "not distributed"
            if not vals or None in consts:
                return None
            return (ONE, f"rank {vals[0]}", test) if len(vals) == 1 else (SEVERAL, "ranks " + _listed(vals), test)
        k = _int_const(right)
        if k is None:
            return None
        if op is ast.Eq:
            return (ONE, f"rank {k}", test) if k >= 0 else None
        top = {ast.Lt: k - 1, ast.LtE: k}.get(op)
        if top is None:
            return None  # ``rank != k``, ``rank > k``: not a test for the main rank
        if top <= 0:
            return (ONE, "rank 0", test) if top == 0 else None
        return SEVERAL, "ranks " + _listed(list(range(top + 1))), test
    if isinstance(test, ast.Name):
        val = ctx.sem.single_value(test.id, scope)
        if val is not None and val is not test:
            return ranks_admitted(ctx, val, ctx.sem.scope_of(val), holds, depth + 1)
    return None


def _listed(vals: list[int]) -> str:
    if len(vals) > 3:
        return f"{vals[0]} to {vals[-1]}"
    return ", ".join(map(str, vals[:-1])) + f" and {vals[-1]}"
