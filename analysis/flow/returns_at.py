"""The element of a helper's returned tuples at one place, when its returns differ in length."""
from __future__ import annotations

import ast

from ..semantic import iter_scope_nodes
from .values import join


def returns_at(hub, view, fn: ast.AST, index: int, arity: int | None = None):
    """Uniformity of element ``index`` of what ``fn`` returns, when every ``return`` of ``fn``
    gives a tuple display (no starred item) and their lengths differ (``return rank, world``
    and ``return rank, world, per_node``): the join of that element over the returns that can
    be read so, those of length ``arity`` (``a, b = fn()`` unpacks only a pair; a longer tuple
    raises) or, with no arity (``fn()[1]``), those longer than ``index``. None when a return is
    not such a tuple, or none fits."""
    if isinstance(fn, ast.Lambda) or getattr(fn, "name", "") == "__init__":
        return None
    memo = view.memo.setdefault("returns_at", {})
    key = (id(fn), index, arity)
    if key in memo:
        return memo[key]
    memo[key] = None  # recursion guard
    fit = tuple_returns(fn, index, arity)
    if fit is None:
        return None
    hub._view_stack.append(view)
    try:
        ev = hub.evaluator(view)
        got = memo[key] = join(ev.value(r.elts[index]) for r in fit)
    finally:
        hub._view_stack.pop()
    return got


def tuple_returns(fn: ast.AST, index: int, arity: int | None = None) -> list | None:
    """The ``return`` tuples of ``fn`` that a read of element ``index`` (unpacked into ``arity``
    names, or indexed) sees; None when a return is no tuple display without a starred item, ``fn``
    yields, or none fits."""
    rets = []
    for n in iter_scope_nodes(fn):
        if n.__class__ is ast.Return:
            rets.append(n.value)
        elif n.__class__ in (ast.Yield, ast.YieldFrom):
            return None
        if len(rets) > 12:
            return None
    if not rets or not all(isinstance(r, ast.Tuple) and not any(isinstance(x, ast.Starred) for x in r.elts)
                           for r in rets):
        return None
    fit = [r for r in rets if (len(r.elts) == arity if arity is not None else len(r.elts) > index)]
    return fit if fit and index < min(len(r.elts) for r in fit) else None


def arity_of(target) -> int | None:
    """The length of a tuple target with no starred item (``a, b = ...``), else None."""
    if isinstance(target, (ast.Tuple, ast.List)) and not any(isinstance(x, ast.Starred) for x in target.elts):
        return len(target.elts)
    return None
