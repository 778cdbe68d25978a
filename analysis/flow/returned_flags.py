"""A main-rank flag that a project function returns: ``device, is_logger = setup(cfg)`` where every
``return`` of ``setup`` (in this module or another one) gives, at that place of its tuple (or as its
whole value), a main-rank test (``dist.get_rank() == 0``), a name bound to one, or ``True`` on the
side of an ``if`` whose other side creates the default group (``if cfg.distributed: init(...);
is_logger = rank == 0`` / ``else: is_logger = True``: one process there).

``rank_tests.polarity`` asks it for a name it cannot read in its own module, so this module sits
below ``rank_tests`` and imports none of the queries above the flow core (``call_sites``,
``fs_effects``, ``group_free`` all lead back to ``rank_tests``): calls are resolved through the hub
(``Analysis.resolve_call``, which also follows ``self.<method>()``), another module is read through
``viewctx.view_ctx``, and the polarity function is passed in (as ``rank_flags.main_flag`` takes it).
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, iter_scope_nodes, param_names, parent
from .summaries import INIT, _inits
from .viewctx import view_ctx


def returned_polarity(ctx, name: str, scope: ast.AST, polarity, depth: int = 0) -> bool | None:
    """True when ``name`` (seen from ``scope``) is bound once, from a call of a project function,
    to a returned main-rank test (see the module); None otherwise."""
    if depth > 6 or not hasattr(ctx, "src"):
        return None  # a rule's context: its analysis resolves calls into the project's modules
    sem = ctx.sem
    binds = sem.assignments(scope).get(name)
    if binds is None and not isinstance(scope, ast.Module):
        binds = sem.assignments(sem.tree).get(name) if not _is_param(scope, name) else None
    if not binds or len(binds) != 1 or not isinstance(binds[0], ast.Assign) or len(binds[0].targets) != 1:
        return None
    st = binds[0]
    if not isinstance(st.value, ast.Call):
        return None
    target, at = st.targets[0], None
    if isinstance(target, ast.Tuple):
        if any(isinstance(e, ast.Starred) for e in target.elts):
            return None
        at = next((i for i, e in enumerate(target.elts) if isinstance(e, ast.Name) and e.id == name), None)
        if at is None:
            return None
    elif not isinstance(target, ast.Name):
        return None
    from . import for_context  # lazy: the hub; it imports nothing that reaches this module

    hub = for_context(ctx)
    got = hub.resolve_call(hub.main, st.value)
    if got is None or not _returns_main(hub, ctx, *got, at, len(getattr(target, "elts", ())), polarity, depth):
        return None
    return True


def _returns_main(hub, ctx, fview, fn, at, width: int, polarity, depth: int) -> bool:
    """Every ``return`` of ``fn`` gives a main-rank test at place ``at`` of its tuple (the whole
    value when ``at`` is None), or returns what a call of another project function returns (``return
    setup(self.cfg)``), which does in turn."""
    if depth > 6 or not isinstance(fn, FUNC_TYPES):
        return False
    rets = [n for n in iter_scope_nodes(fn) if isinstance(n, ast.Return)]
    if not rets:
        return False
    fctx = ctx if fview is hub.main else view_ctx(fview)
    for r in rets:
        v = r.value
        if isinstance(v, ast.Call):
            got = hub.resolve_call(fview, v)
            if got is not None and got[1] is not fn and _returns_main(hub, ctx, *got, at, width, polarity, depth + 1):
                continue
            return False
        if at is not None:
            if not isinstance(v, ast.Tuple) or len(v.elts) != width:
                return False
            v = v.elts[at]
        if not _main_test(hub, fctx, fview, fn, v, polarity, depth):
            return False
    return True


def _main_test(hub, fctx, fview, fn, v, polarity, depth: int) -> bool:
    """``v`` (returned by ``fn``) is a main-rank test, or a name whose every binding in ``fn`` is
    one or ``True`` on a side of a test where ``fn`` creates no group."""
    if polarity(fctx, v, fn, depth + 1) is True:
        return True
    if not isinstance(v, ast.Name) or _is_param(fn, v.id):
        return False
    binds = fview.sem.assignments(fn).get(v.id) or []
    if len(binds) < 2:
        return False
    for b in binds:
        if not (isinstance(b, ast.Assign) and len(b.targets) == 1 and isinstance(b.targets[0], ast.Name)):
            return False
        if polarity(fctx, b.value, fn, depth + 1) is True:
            continue
        if not (isinstance(b.value, ast.Constant) and b.value.value is True and _group_less_side(hub, fview, fn, b)):
            return False
    return True


def _group_less_side(hub, fview, fn, node) -> bool:
    """``node`` sits in one branch of an ``if`` of ``fn`` (no loop between) whose other branch
    creates the default group: ``init_process_group`` there, or a call of a project function whose
    body calls it (``summaries._inits``). Where ``node`` runs, there is one process."""
    child, p = node, parent(node)
    while p is not None and p is not fn:
        if isinstance(p, (ast.For, ast.AsyncFor, ast.While, *FUNC_TYPES, ast.Lambda, ast.ClassDef)):
            return False
        if isinstance(p, ast.If) and child is not p.test:
            other = p.orelse if child in p.body else p.body
            if any(_creates_group(hub, fview, fn, c) for st in other for c in ast.walk(st) if isinstance(c, ast.Call)):
                return True
        child, p = p, parent(p)
    return False


def _creates_group(hub, fview, fn, c: ast.Call) -> bool:
    if (fview.sem.call_qualname(c) or "") == INIT:
        return True
    got = hub.resolve_call(fview, c)
    return got is not None and got[1] is not fn and _inits(hub, got)


def _is_param(fn, name: str) -> bool:
    return isinstance(fn, (*FUNC_TYPES, ast.Lambda)) and name in param_names(fn)


def returned_main_only(ctx, call: ast.Call, scope: ast.AST, polarity, main_only, depth: int = 0) -> bool:
    """``call`` (of ``ctx``'s module, in ``scope``) runs a project function (in this module or
    another) every ``return`` of which gives None, or comes after an early exit that every rank
    but the main one takes: a test of polarity False (``if not is_main(): return None``), or a
    None test of a parameter (``if run_dir is None: return`` / ``if not run_dir: return None``)
    that ``call`` fills with a name holding something other than None on the main rank only
    (``main_only``: ``rank_tests.main_only_value``). The call's result is then None on every
    other rank: ``run_dir = get_run_dir(cfg)``, ``ckpt = latest_checkpoint(run_dir)``."""
    if depth > 6 or not hasattr(ctx, "src"):
        return False
    from . import for_context  # lazy: the hub, as ``returned_polarity``
    from .helper_calls import bind_args

    hub = for_context(ctx)
    got = hub.resolve_call(hub.main, call) if ctx.sem is hub.main.sem else None
    if got is None or not isinstance(got[1], FUNC_TYPES):
        return False
    fview, fn = got
    fctx = ctx if fview is hub.main else view_ctx(fview)
    args = bind_args(call, fn)
    rets = [n for n in iter_scope_nodes(fn) if isinstance(n, ast.Return)]
    some = False
    for r in rets:
        if r.value is None or (isinstance(r.value, ast.Constant) and r.value.value is None):
            continue
        if not any(_exits_off_main(ctx, fctx, fn, st, args, scope, polarity, main_only, depth)
                   for st in fn.body if st.end_lineno is not None and st.end_lineno < r.lineno):
            return False
        some = True
    return some


def _exits_off_main(ctx, fctx, fn, st, args: dict, scope, polarity, main_only, depth: int) -> bool:
    """``st`` (a statement of ``fn``'s body) is ``if <test>: return [None]`` whose test every rank
    but the main one passes (see ``returned_main_only``)."""
    if not (isinstance(st, ast.If) and not st.orelse and len(st.body) == 1 and isinstance(st.body[0], ast.Return)):
        return False
    v, t = st.body[0].value, st.test
    if v is not None and not (isinstance(v, ast.Constant) and v.value is None):
        return False
    name = None
    if isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], ast.Is) \
            and isinstance(t.comparators[0], ast.Constant) and t.comparators[0].value is None:
        name = t.left
    elif isinstance(t, ast.UnaryOp) and isinstance(t.op, ast.Not):
        name = t.operand
    if isinstance(name, ast.Name) and _is_param(fn, name.id):
        a = args.get(name.id)
        if isinstance(a, ast.Call):  # ``newest(output_folder(cfg))``
            return returned_main_only(ctx, a, scope, polarity, main_only, depth + 1)
        return isinstance(a, ast.Name) and main_only(ctx, a.id, scope, depth + 1)
    return polarity(fctx, t, fn, depth + 1) is False
