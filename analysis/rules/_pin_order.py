"""The order of the pin and the calls that need it (DDP001): a use of the current device after the
NCCL init and before ``torch.cuda.set_device`` (or before both), pins made by helpers (another
project module, a library setter fed a rank), spawned workers that join a group through a helper
of the file and never pin. Split from the rule module to keep it small; the rule's docs describe
all of it."""
from __future__ import annotations

import ast

from ..model import Applicability
from ..semantic import FUNC_TYPES, get_arg, has_kwarg, param_names, parent
from ._common import (D, DDP_CLASS, DEVICE_SETTERS, OBJECT_COLLECTIVES, OBJECT_COLLECTIVES_WITH_DEVICE, device_call_index,
                      init_backend_is_nccl, is_simple_ref, single_process_init)
from ._current_device import current_device_uses
from ._per_rank_device import _label

_LOOPS = (ast.For, ast.AsyncFor, ast.While)


def _report_before_pin(ctx, nccl_inits, guarded=()) -> None:
    """The file pins the device, but a call that uses the current device runs after the NCCL init
    and before the pin, in the same function (the ``all_gather_object`` placed above
    ``torch.cuda.set_device(local_rank)``). The pin may be made by a helper (``_helper_pins``).
    ``guarded``: inits whose group is NCCL only where the call's own test says so
    (``if cfg.backend == "nccl":`` around the call, with ``backend=cfg.backend`` at the init), or
    that run only when no group exists yet (``if not is_initialized():``)."""
    sem = ctx.sem
    pins = list(sem.calls_to(*DEVICE_SETTERS))
    direct = {id(c) for c in pins}
    pins += _helper_pins(ctx)
    if not pins:
        return
    _report_before_init_and_pin(ctx, nccl_inits, [p for p in pins if id(p) in direct])
    # ``setup(backend)`` with ``def setup(backend): init_process_group(backend=backend)``: the
    # call is the init of its own function, with the argument as its backend
    joins = _helper_joins(ctx, guarded)
    backend_of = {k: v[1] for k, v in joins.items()}
    guarded = [*guarded, *(v[0] for v in joins.values())]
    guarded_ids = {id(c) for c in guarded}
    for init in [*nccl_inits, *guarded]:
        scope = sem.scope_of(init)
        pin_lines = [c.lineno for c in _pin_like_calls(ctx) if sem.scope_of(c) is scope]
        later = [p for p in pins if sem.scope_of(p) is scope and p.lineno > init.lineno]
        if not later:
            continue
        pin = min(later, key=lambda p: p.lineno)
        cands: list[tuple[ast.AST, str]] = []
        for c in ctx.dist_calls(*OBJECT_COLLECTIVES):
            cands.append((c, "pickles through the current CUDA device"))
        for c in ctx.dist_calls(*OBJECT_COLLECTIVES_WITH_DEVICE):
            if not has_kwarg(c, "device"):
                cands.append((c, "uses the current CUDA device"))
        # (a `barrier()` before the pin is not one: it picks its GPU as in `finish`)
        for node, _ in current_device_uses(ctx, eager_only=True):
            if isinstance(node, ast.Call) and ctx.qn(node) in (DDP_CLASS,) or \
                    isinstance(node, ast.Call) and (ctx.qn(node) or "").startswith(D):
                continue  # the collectives themselves are judged above
            cands.append((node, "uses the current CUDA device, still cuda:0 on every rank"))
        fix = None
        for node, why in sorted(cands, key=lambda a: (a[0].lineno, a[0].col_offset)):
            if sem.scope_of(node) is not scope or not (init.lineno < node.lineno < pin.lineno):
                continue
            if id(init) in guarded_ids and not (
                    (_fallback_init(init) and id(init) not in backend_of and init_backend_is_nccl(init, ctx))
                    or _nccl_by_test(ctx, init, node, backend_of.get(id(init)))):
                continue
            if any(ln <= node.lineno for ln in pin_lines if ln != pin.lineno) or _pinned_before(pin_lines, node, pin):
                continue
            if not _runs_after(sem, init, node) or _shares_loop(sem, node, pin):
                continue
            if any(sem.scope_of(c) is scope and init.lineno < c.lineno < node.lineno
                   for c in _calls_to_pinning_functions(ctx)):
                continue  # ``setup(args)`` of this file pins before the call
            if fix is None:
                fix = _early_pin_fix(ctx, init, pin, node)
            ctx.report(
                node,
                f"`{_label(ctx, node)}` runs after the NCCL `init_process_group` (line {init.lineno}) but before "
                f"`{_label(ctx, pin)}` (line {pin.lineno}): it {why}",
                related=[(init, "NCCL process group created here"), (pin, "the device is pinned only here")],
                fix=fix or None,
            )


def _report_before_init_and_pin(ctx, nccl_inits, pins) -> None:
    """``torch.empty(1, device="cuda")`` at the top of the script, before both the NCCL init and
    ``torch.cuda.set_device(...)``: every rank allocates on (and makes a CUDA context on) cuda:0."""
    sem = ctx.sem
    seen: set[int] = set()
    uses = None
    for init in nccl_inits:
        scope = sem.scope_of(init)
        mine = [p for p in pins if sem.scope_of(p) is scope]
        if not mine:
            continue
        pin_lines = [c.lineno for c in _pin_like_calls(ctx) if sem.scope_of(c) is scope]
        if uses is None:
            uses = [(n, why) for n, why in current_device_uses(ctx, eager_only=True)
                    if not (isinstance(n, ast.Call) and ((ctx.qn(n) or "").startswith(D) or ctx.qn(n) == DDP_CLASS))]
        for node, why in uses:
            if id(node) in seen:
                continue
            pin = min((p for p in mine if p.lineno > node.lineno), key=lambda p: p.lineno, default=None)
            if pin is None or not _runs_before_init_and_pin(ctx, node, init, pin, scope, pin_lines):
                continue
            seen.add(id(node))
            ctx.report(
                node,
                f"{why}, cuda:0 on every rank: it runs before `{_label(ctx, pin)}` (line {pin.lineno}), so "
                f"each process makes a CUDA context and allocates on GPU 0; name the rank's device or move "
                f"it after the pin",
                related=[(pin, "the device is pinned only here"), (init, "NCCL process group created here")],
            )


def _runs_before_init_and_pin(ctx, node, init, pin, scope, pin_lines) -> bool:
    """``node`` (a use of the current device) runs in the init's own function before both the NCCL
    init and the pin, on the straight-line path to them: no pin-like call before it, no branch
    or loop of its own between."""
    sem = ctx.sem
    if sem.scope_of(node) is not scope or not (node.lineno < init.lineno and node.lineno < pin.lineno):
        return False
    if any(ln <= node.lineno for ln in pin_lines):
        return False
    if any(sem.scope_of(c) is scope and c.lineno < node.lineno for c in _calls_to_pinning_functions(ctx)):
        return False
    st = sem.statement_of(node)
    return parent(st) is parent(sem.statement_of(init)) and _runs_after(sem, node, init) \
        and _runs_after(sem, node, pin)


def _helper_joins(ctx, guarded) -> dict[int, tuple[ast.Call, ast.AST]]:
    """id(call) -> (call, the backend it passes) for the statement calls of a function of this file
    (defined once) whose body runs one of ``guarded`` with ``backend=<its own parameter>``, the
    parameter passed by the call (by position or keyword)."""
    sem = ctx.sem
    helpers: dict[str, tuple[ast.AST, str]] = {}
    for init in guarded:
        fn = sem.enclosing_function(init)
        b = get_arg(init, 0, "backend")
        if fn is None or not isinstance(b, ast.Name) or b.id not in param_names(fn) \
                or len(sem.functions.get(fn.name, ())) != 1:
            continue
        helpers[fn.name] = (fn, b.id)
    out: dict[int, tuple[ast.Call, ast.AST]] = {}
    if not helpers:
        return out
    for c in sem.calls:
        f = c.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) and isinstance(
            f.value, ast.Name) and f.value.id == "self" else None
        if name not in helpers or not isinstance(parent(c), (ast.Expr, ast.Assign, ast.Return)):
            continue
        fn, pname = helpers[name]
        pos = [x.arg for x in (*fn.args.posonlyargs, *fn.args.args)]
        if isinstance(f, ast.Attribute) and pos and pos[0] == "self":
            pos = pos[1:]
        arg = next((k.value for k in c.keywords if k.arg == pname), None)
        if arg is None and pname in pos and pos.index(pname) < len(c.args):
            arg = c.args[pos.index(pname)]
        if arg is not None and not isinstance(arg, ast.Starred):
            out[id(c)] = (c, arg)
    return out


def _nccl_by_test(ctx, init: ast.Call, node: ast.AST, backend: ast.AST | None = None) -> bool:
    """``node`` runs only where the init's own backend expression equals ``"nccl"``: an enclosing
    ``if`` (its body) whose test is, or has as a conjunct, ``<backend> == "nccl"`` with the same
    attribute or subscript path as ``backend=`` of the init, and nothing stores to that path in
    the function between them."""
    if backend is None:
        backend = get_arg(init, 0, "backend")
    if backend is None or not isinstance(backend, (ast.Attribute, ast.Subscript, ast.Name)):
        return False
    if isinstance(backend, ast.Attribute) and not is_simple_ref(backend):
        return False
    key = ctx.text(backend)
    scope = ctx.sem.scope_of(init)
    for n in ast.walk(scope):
        if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and init.lineno <= n.lineno <= node.lineno:
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                if ctx.text(t) == key:
                    return False
    child, p = node, parent(node)
    while p is not None and p is not scope:
        if isinstance(p, ast.If) and child in p.body:
            tests = p.test.values if isinstance(p.test, ast.BoolOp) and isinstance(p.test.op, ast.And) else [p.test]
            for t in tests:
                if isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], ast.Eq):
                    a, b = t.left, t.comparators[0]
                    for x, y in ((a, b), (b, a)):
                        if ctx.text(x) == key and isinstance(y, ast.Constant) and isinstance(y.value, str) \
                                and y.value.lower() == "nccl":
                            return True
        child, p = p, parent(p)
    return False


def _helper_pins(ctx) -> list[ast.Call]:
    """Calls (as statements) that pin the device through a helper: a function of another project
    module that calls ``torch.cuda.set_device`` (itself or one it calls, two levels down), or a
    function of a library outside the project named like a device setter
    (``set_cuda_device_index(self.local_rank)``) whose argument is a rank by value flow (the name
    follows that answer). Once per check."""
    return ctx.memo("ddp001.helper_pins", lambda: _helper_pins_of(ctx))


def _helper_pins_of(ctx) -> list[ast.Call]:
    from ..flow.rank_tests import rank_kind
    from ._common import pin_name_kind

    sem = ctx.sem
    out: list[ast.Call] = []
    ana = None
    for c in sem.calls:
        f = c.func
        if not isinstance(f, (ast.Name, ast.Attribute)) or not isinstance(parent(c), ast.Expr):
            continue
        qn = ctx.qn(c) or ""
        if qn.startswith("torch."):
            continue
        name = f.id if isinstance(f, ast.Name) else f.attr
        if name in sem.functions:
            continue  # a function of this file: ``_calls_to_pinning_functions`` reads it
        if ana is None:
            from ..flow import for_context

            ana = for_context(ctx)
        got = ana.resolve_call(ana.main, c)
        if got is not None and got[0] is not ana.main:
            if _pins_in(ana, got[0], got[1], 0):
                out.append(c)
            continue
        if got is None and pin_name_kind(name) == 2 and len(c.args) == 1 and not c.keywords \
                and rank_kind(ctx, c.args[0], sem.scope_of(c)) is not None:
            out.append(c)
    return out


def _pins_in(ana, view, fn, depth: int) -> bool:
    if depth > 2 or not isinstance(fn, FUNC_TYPES):
        return False
    memo = view.memo.setdefault("ddp001.pins_in", {})
    key = (id(fn), depth)  # keyed by depth too: an answer cut at the depth limit is not the answer from the top
    if key in memo:
        return memo[key]
    memo[key] = False
    vsem = view.sem
    # the answer read other modules: they join this view's dependencies (a stale memo is dropped)
    ana._view_stack.append(view)
    try:
        for c in vsem.function_calls(fn):
            if vsem.call_qualname(c) in DEVICE_SETTERS:
                memo[key] = True
                break
            if depth < 2 and isinstance(parent(c), ast.Expr):
                got = ana.resolve_call(view, c)
                if got is not None and _pins_in(ana, got[0], got[1], depth + 1):
                    memo[key] = True
                    break
    finally:
        ana._view_stack.pop()
    return memo[key]


def _report_unpinned_workers(ctx, inits) -> set[int]:
    """A function that ``mp.spawn`` starts (a fresh process: nothing is pinned yet) joins an NCCL
    group through a helper of this file (``setup(rank, world_size)`` whose body runs
    ``init_process_group`` with an NCCL backend, also a parameter whose default is one), never
    pins its device, and then uses the current device: an object collective without ``device=``
    (in the worker, or in a helper of this file it calls), ``.cuda()``, ``device="cuda"``. Reported
    at the worker's helper call. Returns the ids of the helpers' inits reported this way."""
    from ._spawn import spawn_calls, target_def

    sem = ctx.sem
    if not inits:
        return set()
    init_fns: dict[str, ast.Call] = {}  # helper name -> its NCCL init
    for c in inits:
        fn = sem.enclosing_function(c)
        if fn is None or len(sem.functions.get(fn.name, ())) != 1:
            continue
        if single_process_init(ctx, c) or not (init_backend_is_nccl(c, ctx) or _nccl_param_default(ctx, c, fn)):
            continue
        init_fns[fn.name] = c
    if not init_fns:
        return set()
    direct = dict(init_fns)
    # a helper of the file that calls one of them (as a statement or its return), one level up
    for c in sem.calls:
        f = c.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
        if name not in direct or not isinstance(parent(c), (ast.Expr, ast.Return)):
            continue
        fn = sem.enclosing_function(c)
        if fn is None or fn.name in init_fns or len(sem.functions.get(fn.name, ())) != 1:
            continue
        helper = sem.functions[name][0]
        if init_backend_is_nccl(direct[name], ctx) or _default_backend_kept(direct[name], helper, c):
            init_fns[fn.name] = direct[name]
    targets = []
    for sc in spawn_calls(ctx):
        t = target_def(ctx, sc)
        if t is not None and t not in targets:
            targets.append(t)
    reported: set[int] = set()
    uses = None
    for w in targets:
        calls = list(sem.function_calls(w))
        # ``setup(rank, world)`` / ``Helper().setup(...)`` as a statement of the worker's own body
        joins = [c for c in calls if _callee_name(c) in init_fns
                 and isinstance(parent(c), ast.Expr) and parent(parent(c)) is w]
        if not joins:
            continue
        join = joins[0]
        init = init_fns[_callee_name(join)]
        callee = sem.functions[_callee_name(join)][0]
        if not init_backend_is_nccl(init, ctx) and callee is sem.enclosing_function(init) \
                and not _default_backend_kept(init, callee, join):
            continue  # ``dist_init(rank, world, backend="gloo")``
        pin_ids = {id(c) for c in _pin_like_calls(ctx)} | {id(c) for c in _calls_to_pinning_functions(ctx)} \
            | {id(c) for c in _helper_pins(ctx)}
        if any(id(c) in pin_ids for c in calls):
            continue  # the worker pins (where: ``_report_before_pin`` judges the order)
        if uses is None:
            uses = current_device_uses(ctx, eager_only=False)
        found: list[tuple[ast.AST, str]] = []
        for c in calls:
            if c.lineno <= join.lineno:
                continue
            qn = ctx.qn(c) or ""
            short = qn[len(D):] if qn.startswith(D) else ""
            if short in OBJECT_COLLECTIVES or (short in OBJECT_COLLECTIVES_WITH_DEVICE and not has_kwarg(c, "device")):
                found.append((c, "pickles through the current CUDA device"))
            elif _callee_name(c) is not None and _callee_name(c) not in init_fns \
                    and len(sem.functions.get(_callee_name(c), ())) == 1:
                inner = _object_collective_in(ctx, sem.functions[_callee_name(c)][0])
                if inner is not None:
                    found.append((c, f"runs `{_label(ctx, inner)}` (line {inner.lineno}), which pickles through "
                                     f"the current CUDA device"))
        for n, why in uses:
            if sem.enclosing_function(n) is w and n.lineno > join.lineno:
                found.append((n, why[why.find("` ") + 2:] if why.startswith("`") else why))
        if not found:
            continue
        first, why = min(found, key=lambda a: (a[0].lineno, a[0].col_offset))
        reported.add(id(init))
        ctx.report(
            join,
            f"`{w.name}` is started by `mp.spawn` and joins an NCCL group here (`init_process_group` on line "
            f"{init.lineno}) but never pins its device: `{_label(ctx, first)}` on line {first.lineno} {why}, "
            f"cuda:0 on every rank (hang or NCCL 'invalid usage')",
            related=[(init, "the NCCL init_process_group, with no set_device"), (first, "uses the current device")],
        )
    return reported


def _callee_name(c: ast.Call) -> str | None:
    """``f`` of ``f(...)``, ``self.f(...)``, ``Helper().f(...)`` (a plain receiver, not a module's
    attribute: ``dist.f`` is resolved by qualified name)."""
    f = c.func
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute) and (
            (isinstance(f.value, ast.Name) and f.value.id in ("self", "cls"))
            or (isinstance(f.value, ast.Call) and isinstance(f.value.func, ast.Name))):
        return f.attr
    return None


def _nccl_param_default(ctx, init: ast.Call, fn) -> bool:
    """``backend=backend`` with ``def dist_init(rank, world, backend=BACKEND)`` and ``BACKEND`` NCCL
    (or NCCL on a GPU node: ``NCCL if torch.cuda.is_available() else GLOO``)."""
    from ..torch_api import backend_mentions_nccl

    b = get_arg(init, 0, "backend")
    if not isinstance(b, ast.Name) or b.id not in param_names(fn):
        return False
    if any(b.id in (t.id for t in ast.walk(st) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store))
           for st in fn.body if isinstance(st, (ast.Assign, ast.AugAssign, ast.AnnAssign))):
        return False
    a = fn.args
    pos = [x.arg for x in (*a.posonlyargs, *a.args)]
    defaults = dict(zip(pos[len(pos) - len(a.defaults):], a.defaults)) if a.defaults else {}
    defaults.update({k.arg: d for k, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None})
    d = defaults.get(b.id)
    if isinstance(d, ast.Name) and ctx.sem.single_value(d.id, ctx.sem.tree) is None:
        # ``if torch.cuda.is_available(): BACKEND = "nccl" else: BACKEND = "gloo"``: NCCL on a GPU
        # node, as the if-expression form
        binds = ctx.sem.assignments(ctx.sem.tree).get(d.id, [])
        return any(isinstance(st, ast.Assign) and backend_mentions_nccl(st.value, ctx, ctx.sem.tree) for st in binds)
    return d is not None and backend_mentions_nccl(d, ctx, ctx.sem.tree)


def _default_backend_kept(init: ast.Call, fn, call: ast.Call) -> bool:
    """``call`` of ``fn`` leaves the backend parameter that ``init`` uses at its default (or sets
    it to a literal NCCL)."""
    b = get_arg(init, 0, "backend")
    if not isinstance(b, ast.Name):
        return False
    for k in call.keywords:
        if k.arg == b.id:
            return isinstance(k.value, ast.Constant) and isinstance(k.value.value, str) \
                and "nccl" in k.value.value.lower()
        if k.arg is None:
            return False  # ``**kwargs``: unknown
    pos = [x.arg for x in (*fn.args.posonlyargs, *fn.args.args)]
    if any(isinstance(a, ast.Starred) for a in call.args):
        return False
    return b.id not in pos or pos.index(b.id) >= len(call.args)


def _object_collective_in(ctx, fn) -> ast.Call | None:
    """An object collective that pickles through the current device, in ``fn``'s own body."""
    sem = ctx.sem
    for c in sem.function_calls(fn):
        qn = ctx.qn(c) or ""
        short = qn[len(D):] if qn.startswith(D) else ""
        if short in OBJECT_COLLECTIVES or (short in OBJECT_COLLECTIVES_WITH_DEVICE and not has_kwarg(c, "device")):
            return c
    return None


def _calls_to_pinning_functions(ctx) -> list[ast.Call]:
    """Calls of functions of this file that pin the device, directly or through another one
    (once per check)."""
    return ctx.memo("ddp001.calls_to_pinning", lambda: _calls_to_pinning_functions_of(ctx))


def _calls_to_pinning_functions_of(ctx) -> list[ast.Call]:
    sem = ctx.sem
    pinning: set[str] = set()
    for c in _pin_like_calls(ctx):
        fn = sem.enclosing_function(c)
        if fn is not None:
            pinning.add(fn.name)
    for _ in range(3):
        grew = False
        for c in sem.calls:
            f = c.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name in pinning and name in sem.functions:
                fn = sem.enclosing_function(c)
                if fn is not None and fn.name not in pinning:
                    pinning.add(fn.name)
                    grew = True
        if not grew:
            break
    out = []
    for c in sem.calls:
        f = c.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
        if name in pinning and name in sem.functions:
            out.append(c)
    return out


def _pinned_before(pin_lines, node, pin) -> bool:
    return any(ln < node.lineno for ln in pin_lines)


def _pin_like_calls(ctx) -> list[ast.Call]:
    """The calls that pin (or may pin) the device; once per check."""
    return ctx.memo("ddp001.pin_like_calls", lambda: _pin_like_calls_of(ctx))


def _pin_like_calls_of(ctx) -> list[ast.Call]:
    sem = ctx.sem
    out = list(sem.calls_to(*DEVICE_SETTERS))
    for c in sem.calls_to("torch.cuda.device", "torch.cuda.device_of"):
        if isinstance(parent(c), ast.withitem):
            out.append(c)
    for c, n, kind in device_call_index(ctx).named:
        if kind == 2 or (n not in sem.functions and not (ctx.qn(c) or "").startswith("torch.")):
            out.append(c)
    return out


def _runs_after(sem, first: ast.AST, node: ast.AST) -> bool:
    """``first``'s statement is followed, in its own statement list, by a statement holding
    ``node`` (straight-line order, ignoring early exits)."""
    st = sem.statement_of(first)
    block = parent(st)
    for field in ("body", "orelse", "finalbody", "handlers"):
        lst = getattr(block, field, None)
        if isinstance(lst, list) and st in lst:
            idx = lst.index(st)
            later = lst[idx + 1:]
            n = sem.statement_of(node)
            while n is not None and n is not block:
                if n in later:
                    return True
                n = parent(n)
            return False
    return False


def _shares_loop(sem, node: ast.AST, pin: ast.AST) -> bool:
    """Both in one loop: from the second iteration on, the device is pinned."""
    loops = {id(a) for a in sem.ancestors(node) if isinstance(a, _LOOPS)}
    return any(id(a) in loops for a in sem.ancestors(pin) if isinstance(a, _LOOPS))


def _early_pin_fix(ctx, init: ast.Call, pin: ast.Call, first: ast.AST):
    """Pin right after the init (or right after the pinned name is bound, when that happens between
    the init and the first call that needs the pin)."""
    sem = ctx.sem
    if len(pin.args) != 1 or pin.keywords or not isinstance(pin.args[0], ast.Name):
        return False
    name = pin.args[0].id
    scope = sem.scope_of(init)
    init_stmt = sem.statement_of(init)
    params = set(param_names(scope)) if isinstance(scope, FUNC_TYPES) else set()
    binds = sem.assignments(scope).get(name, [])
    anchor = None
    if name in params or any(b.end_lineno < init_stmt.lineno for b in binds):
        if any(init_stmt.lineno <= b.lineno < pin.lineno for b in binds):
            return False  # rebound in between: the value at the init is not the pinned one
        anchor = init_stmt
    elif len(binds) == 1 and isinstance(binds[0], ast.Assign) and binds[0].end_lineno < first.lineno \
            and _runs_after(sem, init, binds[0]) and _runs_after(sem, binds[0], first):
        anchor = binds[0]  # ``local_rank = int(os.environ["LOCAL_RANK"])`` just after the init
    if anchor is None:
        return False
    edit = ctx.insert_after(anchor, f"{ctx.text(pin.func)}({name})")
    if edit is None:
        return False
    where = "`init_process_group`" if anchor is init_stmt else f"`{name}` is known"
    return ctx.fix(Applicability.SAFE, f"Pin the device as soon as {where}: "
                                       f"`{ctx.text(pin.func)}({name})`", [edit])


def _fallback_init(call: ast.Call) -> bool:
    p = parent(call)
    while p is not None and not isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
        if isinstance(p, ast.If) and any(
                (n.__class__ is ast.Name and n.id == "is_initialized")
                or (n.__class__ is ast.Attribute and n.attr == "is_initialized") for n in ast.walk(p.test)):
            return True
        p = parent(p)
    return False


def callers_pin_after(ctx, init: ast.Call) -> bool:
    """``init`` is in a module-level function of this file that no code of this file calls, and
    every call of it in the project's other files is preceded or followed, in the caller's
    function, by a ``torch.cuda.set_device(...)`` (VILA's ``dist.init()`` then
    ``torch.cuda.set_device(devices[0])``; a worker's ``torch.cuda.set_device(local_rank)`` then
    ``setup_distributed()``): the group's users pin the device before any collective of theirs."""
    from ._common import project_callers  # lazy: reads the project's other files

    fn = ctx.sem.enclosing_function(init)
    if fn is None or not isinstance(parent(fn), ast.Module):
        return False
    if any(c.func.__class__ is ast.Name and c.func.id == fn.name for c in ctx.sem.calls):
        return False
    callers = project_callers(ctx, {fn.name})
    if not callers:
        return False
    for cctx, call, node in callers:
        if node is not fn:
            return False
        if not _pins_around(cctx, call) and not _callers_of_caller_pin(ctx, cctx, call):
            return False
    return True


def _pins_around(cctx, call: ast.Call) -> bool:
    """The function of ``call`` (in ``cctx``'s file) calls ``torch.cuda.set_device(...)`` too."""
    csem = cctx.sem
    scope = csem.enclosing_function(call)
    return any(c is not call and csem.enclosing_function(c) is scope and csem.call_qualname(c) in DEVICE_SETTERS
               for c in csem.calls)


def _callers_of_caller_pin(ctx, cctx, call: ast.Call) -> bool:
    """One call up: ``call`` sits in a module-level function of another module that its own module
    never calls, and every call of that function in the project's other files pins the device in
    the caller's function (``cfg = setup()`` then ``torch.cuda.set_device(cfg.local_rank)``, where
    ``setup`` calls the init helper)."""
    from ..flow import for_context
    from ._common import project_callers  # lazy: reads the project's other files

    g = cctx.sem.enclosing_function(call)
    if g is None or not isinstance(parent(g), ast.Module) or not cctx.filename:
        return False
    if any(c.func.__class__ is ast.Name and c.func.id == g.name for c in cctx.sem.calls):
        return False
    view = for_context(ctx).view_of(cctx.filename)
    if view is None:
        return False
    up = project_callers(ctx, {g.name}, target=view)
    return bool(up) and all(node is g and _pins_around(uctx, ucall) for uctx, ucall, node in up)
