"""A container that holds something only on the main rank: a uniformity question about a value's
*contents* rather than its value.

``main_only_filled(hub, view, expr, at)`` answers where the value of ``expr`` at ``at`` is filled
on the main rank and empty (None, ``{}``, ``[]``, ``dict()``) on the others: among its origins
(``origins.origins``: names and their reaching bindings, tuple unpacking, ``self`` attributes,
helper returns in this module or another, parameters through their calls, entries of dicts
(``ckpt.get("model", {})`` of ``ckpt = torch.load(f)`` on the main rank and ``{"state": {}}`` on the
others: the loaded file, and the default), a conditional expression split into its two arms) one value that is not empty reaches the use only on the main
rank, and one empty value reaches it elsewhere. "Only on the main rank" is ``rank.rank0_guarded``
of the value in its own function (a main-rank ``if``, the arm of a conditional expression, an
early exit of the other ranks), or of a call on the way to it (``sd = read(p) if rank == 0 else
{}``). Nothing is reported where the evaluator finds the value uniform at the use (a collective
made it equal: ``broadcast_object_list`` before the use).
"""
from __future__ import annotations

import ast

from .origins import origins

_EMPTY_CTORS = frozenset({"dict", "list", "tuple", "set", "OrderedDict", "collections.OrderedDict"})


def is_empty(sem, e: ast.AST) -> bool:
    """``e`` is None or an empty container: ``{}``, ``[]``, ``()``, ``dict()``, ``OrderedDict()``."""
    if isinstance(e, ast.Constant):
        return e.value is None
    if isinstance(e, ast.Dict):
        return not e.keys
    if isinstance(e, (ast.List, ast.Tuple, ast.Set)):
        return not e.elts
    if isinstance(e, ast.Call) and not e.args and not e.keywords:
        f = e.func
        qn = sem.call_qualname(e)
        if qn is None and isinstance(f, ast.Name):
            qn = f.id
        return qn in _EMPTY_CTORS
    return False


def main_only_filled(hub, view, expr, at, callers=None):
    """((view, filled value), (view, empty value)) when ``expr`` at ``at`` holds something only on
    the main rank and is empty on the other ranks (see the module's docstring); else None."""
    from .fs_effects import view_ctx  # lazy: fs_effects sits above the flow core
    from .rank import rank0_guarded

    ev = hub.evaluator(view)
    if ev.value(expr).uniform:
        return None
    filled = empty = None
    for v, e, guarded in _leaves(hub, view, expr, at, callers):
        main = guarded or rank0_guarded(view_ctx(v), e, callers=False) is True
        if is_empty(v.sem, e):
            if not main and empty is None:
                empty = (v, e)
        elif main and filled is None:
            filled = (v, e)
    return (filled, empty) if filled is not None and empty is not None else None


def _leaves(hub, view, expr, at, callers, guarded: bool = False, frames=(), depth: int = 0):
    """(view, leaf, guarded): ``origins`` in context with a conditional expression split into its
    arms; ``guarded`` when a call on the way (or the arm taken) runs only on the main rank."""
    from .fs_effects import view_ctx
    from .rank import rank0_guarded

    for v, e, _p, fr in origins(hub, view, expr, at, keep_path="entries", frames=frames, callers=callers):
        g = guarded or any(rank0_guarded(view_ctx(cv), c, callers=False) is True for _, c, cv in fr)
        if isinstance(e, ast.IfExp) and depth < 4:
            for arm in (e.body, e.orelse):
                arm_g = g or rank0_guarded(view_ctx(v), arm, callers=False) is True
                yield from _leaves(hub, v, arm, e, callers, arm_g, fr, depth + 1)
        else:
            yield v, e, g
