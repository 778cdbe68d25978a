"""Paths a project function returns after only the main rank produced them inside it
(``main_only_returns``), and whether a use is the value a call returned (``result_of``): DDP216's
"every rank reads what a helper fetched on rank 0 and returned at once" (``download_file`` that
downloads under ``if rank == 0`` and returns the local path with no barrier before its ``return``).
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, parent
from .values import summary
from .fs_effects import (PRODUCES, _nested, call_effects, call_site_effects, may_resolve_any, path_key, resolve,
                         view_ctx)


def main_only_returns(hub, view, fn) -> list:
    """[(effect, guard ``if``, ``return``, the guard's view)] for each path ``fn`` returns that only the main rank
    produced inside it: a download, extraction, write or folder made under a main-rank test of
    ``fn`` (directly or in a project function it calls there), whose path is the returned value
    (the same key, or the same name with the same bindings reaching both), with no synchronising
    call of ``fn`` between the end of that test's block and the ``return``. A caller that reads the
    returned path on every rank reads what may not exist yet (``download_file`` that fetches on
    rank 0 and returns the local path at once); also through ``return helper(...)`` of such a
    helper. Memoised per function."""
    if not isinstance(fn, FUNC_TYPES):
        return []
    def compute():
        hub._view_stack.append(view)
        try:
            return _main_only_returns(hub, view, fn)
        finally:
            hub._view_stack.pop()

    # a recursion reads as nothing, and what it made is not memoised for good (``values.summary``)
    return summary(hub.cut_state, view.memo.setdefault("fs.main_only_returns", {}), id(fn), compute, [])


def _guarded_effects(hub, view, fn) -> list:
    """[(call, guard ``if``, effects)] for each call of ``fn`` (not in a nested function) under a
    main-rank test of ``fn`` (the outermost such ``if``) that produces a file or folder (a
    download, extraction, write, folder made; directly or in a project function it calls there),
    on a path shared by the ranks. Memoised per function."""
    # a recursion reads as nothing, and what it made is not memoised for good (``values.summary``)
    return summary(hub.cut_state, view.memo.setdefault("fs.guarded_effects", {}), id(fn),
                   lambda: _guarded_effects_of(hub, view, fn), [])


def _guarded_effects_of(hub, view, fn) -> list:
    from .calls import scope_calls
    from .rank_tests import polarity

    vctx = view_ctx(view)
    out = []
    for c in scope_calls(view, fn):
        if _nested(c, fn):
            continue
        # what the call produces first (a vocabulary lookup; a project helper's summary is memoised),
        # the main-rank test around it only for a call that produces something
        effs = call_effects(vctx, c)
        if not effs and may_resolve_any(view, c):
            target = resolve(hub, view, c)
            if target is not None and target[1] is not fn:
                effs = call_site_effects(hub, view, c, target, 1)
        effs = [e for e in effs if e.kind in PRODUCES and e.path is not None and not e.per_rank]
        if not effs:
            continue
        guard = None
        child, p = c, parent(c)
        while p is not None and p is not fn:
            if isinstance(p, ast.If) and child is not p.test:
                pol = polarity(vctx, p.test, fn)
                if (pol is True and child in p.body) or (pol is False and child in p.orelse):
                    guard = p
            child, p = p, parent(p)
        if guard is None:
            continue
        kept = []
        for e in effs:
            if e.view is None:
                e.view = e.home = view
            kept.append(e)
        if kept:
            out.append((c, guard, kept))
    return out


def main_only_effects(hub, view, fn) -> list:
    """[(effect, guard ``if``)] for each file or folder only the main rank produces inside ``fn``
    (``_guarded_effects``) with no synchronising call of ``fn`` after that test's block: a caller
    that runs ``fn`` on every rank and then reads the path on every rank, with no barrier after the
    call, reads what may not exist yet (``prepare_data(root)`` downloading under ``if rank == 0``,
    then every rank building the dataset from ``root``). The effects keep ``fn``'s parameters in
    their paths (``call_site_effects(..., effs=...)`` puts a call's arguments in)."""
    from .sync import main_first_with, sync_points

    if not isinstance(fn, FUNC_TYPES):
        return []
    got = _guarded_effects(hub, view, fn)
    if not got:
        return []
    points = sync_points(hub, view, fn)
    out = []
    for c, guard, effs in got:
        end = (guard.end_lineno, guard.end_col_offset)
        if any((p.lineno, p.col_offset) >= end for p in points) or main_first_with(view.sem, c, fn) is not None:
            continue
        out.extend((e, guard) for e in effs)
    return out


def _main_only_returns(hub, view, fn) -> list:
    from ..semantic import iter_scope_nodes
    from .bindings import reaching
    from .sync import main_first_with, synchronised_between

    rets = [n for n in iter_scope_nodes(fn) if isinstance(n, ast.Return) and n.value is not None]
    if not rets:
        return []
    vctx = view_ctx(view)
    out = []
    for c, guard, effs in _guarded_effects(hub, view, fn):
        if main_first_with(view.sem, c, fn) is not None:
            continue  # the other ranks wait for it at the ``with``
        for e in effs:
            k = e.path_key()
            for r in rets:
                if (r.lineno, r.col_offset) < (guard.end_lineno, guard.end_col_offset):
                    continue
                same = k is not None and k == path_key(vctx, r.value)
                if not same and e.view is view and isinstance(e.path, ast.Name) and isinstance(r.value, ast.Name) \
                        and e.path.id == r.value.id:
                    ka, ea = reaching(view, e.path.id, e.path)
                    kb, eb = reaching(view, r.value.id, r.value)
                    same = ka == kb and ka in ("events", "param") and (
                        ea is eb if ka == "param" else [id(x) for x in ea or ()] == [id(x) for x in eb or ()])
                if same and synchronised_between(hub, view, fn, guard, r) is None:
                    out.append((e, guard, r, view))
                    break
    for r in rets:
        # ``return fetch(url)``: what the helper it returns the result of hands back
        if isinstance(r.value, ast.Call) and may_resolve_any(view, r.value):
            target = resolve(hub, view, r.value)
            if target is not None and target[1] is not fn:
                out.extend((e, g, r, gv) for e, g, _r, gv in main_only_returns(hub, *target)[:1])
    return out


def result_of(view, expr, call, at) -> bool:
    """``expr`` (a path used at ``at``) is the value ``call`` returned: the call itself, or a name
    whose only binding reaching ``at`` is ``name = call``."""
    from .bindings import reaching

    if expr is call:
        return True
    if not isinstance(expr, ast.Name):
        return False
    kind, evs = reaching(view, expr.id, at)
    if kind != "events" or len(evs or ()) != 1 or not isinstance(evs[0], ast.Assign) or len(evs[0].targets) != 1:
        return False
    t, v = evs[0].targets[0], evs[0].value
    if isinstance(t, ast.Name):
        return v is call
    # ``ckpt, cfg = fetch(url), load_cfg()``: the element in the same place
    if isinstance(t, ast.Tuple) and isinstance(v, ast.Tuple) and len(t.elts) == len(v.elts):
        return any(isinstance(x, ast.Name) and x.id == expr.id and y is call for x, y in zip(t.elts, v.elts))
    return False


def main_only_made(hub, view, fn, depth: int = 0) -> list:
    """[(effect, synced)] for each file or folder that only the main rank produces when every rank
    runs ``fn``: under a main-rank test of ``fn`` (``_guarded_effects``), or inside a project
    function ``fn`` calls on every rank (a constructor, a method, a few calls deep), its path in
    ``fn``'s terms (``call_site_effects``). ``synced``: the other ranks wait for it before ``fn``
    returns (a synchronising call after the test's block or after that call, or a
    ``sync.main_first_with`` block around the production): once ``fn`` returned on every rank, the
    path exists for all of them. Memoised per function."""
    if not isinstance(fn, FUNC_TYPES):
        return []
    memo = view.memo.setdefault("fs.main_only_made", {})
    key = (id(fn), depth)  # keyed by depth too: an answer cut at the depth limit is not the answer from the top
    got = memo.get(key)
    if got is None:
        memo[key] = []  # recursion guard
        hub._view_stack.append(view)
        try:
            got = memo[key] = _main_only_made(hub, view, fn, depth)
        finally:
            hub._view_stack.pop()
    return got


def _main_only_made(hub, view, fn, depth: int) -> list:
    from .calls import scope_calls
    from .rank import rank0_guarded
    from .sync import main_first_with, sync_points

    points = sync_points(hub, view, fn)

    def after(node) -> bool:
        end = (node.end_lineno, node.end_col_offset)
        return any((p.lineno, p.col_offset) >= end for p in points)

    out = []
    for c, guard, effs in _guarded_effects(hub, view, fn):
        synced = after(guard) or main_first_with(view.sem, c, fn) is not None
        out.extend((e, synced) for e in effs)
    if depth >= 4:
        return out
    vctx = view_ctx(view)
    for c in scope_calls(view, fn):
        if _nested(c, fn) or not may_resolve_any(view, c) or rank0_guarded(vctx, c, callers=False) is True:
            continue
        target = resolve(hub, view, c)
        if target is None or target[1] is fn:
            continue
        inner = main_only_made(hub, *target, depth=depth + 1)
        if not inner:
            continue
        waited = after(c)
        for e, synced in inner:
            for b in call_site_effects(hub, view, c, target, depth + 1, effs=[e]):
                out.append((b, synced or waited))
        if len(out) >= 24:
            break
    return out
