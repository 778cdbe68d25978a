"""Device-wide CUDA synchronisation, and the NCCL-only process groups on which it completes a
collective whose work handle was dropped.

- ``torch_callee(hub, view, call)``: the ``torch.`` name ``call`` calls, through the module's
  aliases (``from torch.cuda import synchronize``, ``sync = torch.cuda.synchronize``) and those of
  the project modules it imports the name from (``from utils.dist import synchronize`` where
  ``utils/dist.py`` binds ``synchronize = torch.cuda.synchronize``, re-exported by a package);
- ``syncs_device(hub, view, call)``: ``call`` waits for every stream of the device
  (``torch.cuda.synchronize()``, ``torch.accelerator.synchronize()``), itself or through a project
  function that surely makes such a call (a statement of its body that every call runs);
- ``nccl_only(hub, view, call, op)``: the process group of the collective ``call`` runs NCCL and
  nothing else: a group of ``dist.new_group(backend="nccl")``, or the default group when every
  ``init_process_group`` the module can see (its own, and those of the project functions it calls)
  asks for NCCL alone;
- ``completed_by_device_sync(hub, view, call, op)``: the device synchronisation that ends ``call``.

Why it holds: with NCCL a collective is a kernel on the device (on the communicator's own stream),
queued when the call returns; ``cudaDeviceSynchronize`` returns after every kernel of every stream
of the device ended, so the tensors hold the result. A stream's own synchronisation
(``torch.cuda.current_stream().synchronize()``) does not wait for the NCCL stream and never counts.
Gloo (and the CPU part of ``"cpu:gloo,cuda:nccl"`` or of the default backend) runs the collective
on a thread of the host that no CUDA synchronisation waits for, so those groups never qualify.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, get_arg
from ..torch_api import D, WORLD_GROUPS, backend_parts, constant_of

DEVICE_SYNCS = frozenset({"torch.cuda.synchronize", "torch.accelerator.synchronize"})
INIT = D + "init_process_group"
NEW_GROUP = D + "new_group"


def torch_callee(hub, view, call: ast.Call) -> str | None:
    """The qualified ``torch.`` name ``call`` calls, or None."""
    qn = view.sem.call_qualname(call) or ""
    if qn.startswith("torch."):
        return qn
    f = call.func
    from . import _local_binding  # lazy: the package imports its modules

    if isinstance(f, ast.Name) and f.id not in view.sem.aliases:
        if not _local_binding(view, f.id, call):
            return _imported_torch_name(hub, view, f.id, 0)
    elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and not _local_binding(view, f.value.id, call):
        imp = view.imports.get(f.value.id)  # ``import utils.dist as du`` then ``du.synchronize()``
        if imp is not None and imp[2] is None:
            v2 = hub.module_view(view, imp[0], imp[1])
            if v2 is not None:
                qn = v2.sem.aliases.get(f.attr) or ""
                return qn if qn.startswith("torch.") else _imported_torch_name(hub, v2, f.attr, 1)
    return None


def _imported_torch_name(hub, view, name: str, depth: int) -> str | None:
    """The ``torch.`` value a module-level name imported from a project module is bound to there."""
    imp = view.imports.get(name)
    if imp is None or imp[2] is None or depth > 3:
        return None
    v2 = hub.module_view(view, imp[0], imp[1])
    if v2 is None:
        return None
    qn = v2.sem.aliases.get(imp[2]) or ""
    if qn.startswith("torch."):
        return qn
    if imp[2] in v2.defs or imp[2] in v2.classes:
        return None
    return _imported_torch_name(hub, v2, imp[2], depth + 1)


def syncs_device(hub, view, call: ast.Call, depth: int = 0) -> bool:
    """``call`` synchronises the whole device: a device-wide synchronisation (``DEVICE_SYNCS``),
    or a call of a project function whose body surely makes one (``_surely_syncs``)."""
    if torch_callee(hub, view, call) in DEVICE_SYNCS:
        return True
    if depth >= 3:
        return False
    target = hub.resolve_call(view, call)
    return target is not None and _surely_syncs(hub, *target, depth + 1)


def _surely_syncs(hub, view, fn, depth: int) -> bool:
    """A statement of ``fn``'s body that every call of it runs (before any statement that may
    leave it or raise) is a call that synchronises the device."""
    if not isinstance(fn, FUNC_TYPES):
        return False
    for st in fn.body:
        if isinstance(st, ast.Expr) and isinstance(st.value, ast.Call) and syncs_device(hub, view, st.value, depth):
            return True
        if any(isinstance(n, (ast.Return, ast.Raise, ast.Yield, ast.YieldFrom)) for n in ast.walk(st)):
            return False
    return False


def _nccl_expr(hub, view, expr, at, depth: int = 0) -> bool:
    """The backend expression ``expr`` surely names NCCL alone: a string every part of which is
    NCCL (``"nccl"``, ``"cuda:nccl"``), ``dist.Backend.NCCL``, a conditional expression both of whose
    branches are, a value that resolves to one (``constant_of``), or a parameter of the function
    around ``at`` that every call in its module passes (or leaves at a default) as one."""
    if expr is None or depth > 3:
        return False
    if isinstance(expr, ast.IfExp):
        return _nccl_expr(hub, view, expr.body, at, depth + 1) and _nccl_expr(hub, view, expr.orelse, at, depth + 1)
    if (view.sem.qualname(expr) or "").lower() == D.lower() + "backend.nccl":
        return True
    c = constant_of(view.sem, expr)
    if c is not None:
        return isinstance(c.value, str) and set(backend_parts(c.value)) == {"nccl"}
    fn = view.sem.enclosing_function(at)
    if isinstance(expr, ast.Name) and fn is not None:
        from .params import constants_at_calls

        vals = constants_at_calls(view, hub, fn, expr.id)
        return bool(vals) and all(isinstance(v.value, str) and set(backend_parts(v.value)) == {"nccl"} for v in vals)
    return False


def visible_inits(hub, view) -> list | None:
    """The ``init_process_group`` calls (view, call) of the module and of the project functions
    it calls; None when the module (or one of those) makes the group through a library
    (``LIBRARY_INITS``: DeepSpeed, Accelerate...), whose backend is not read (``init_device_mesh``
    beside an explicit init only reuses the group the init makes)."""
    from .lifecycle import init_sites, library_init_sites

    memo = view.memo.setdefault("device_sync.inits", {})
    if "got" in memo:
        return memo["got"]
    sem = view.sem
    scopes = [sem.tree, *(f for fs in sem.functions.values() for f in fs)]
    out, lib, mesh = [], False, False
    for s in scopes:
        out.extend(x for x in init_sites(hub, view, s) if x not in out)
        for v, c in library_init_sites(hub, view, s):
            if (v.sem.call_qualname(c) or "").endswith(".init_device_mesh"):
                mesh = True
            else:
                lib = True
    # ``init_device_mesh`` makes the group only where none exists: beside an explicit init (which
    # must come first, an init after it raising "already initialized"), the explicit one decides
    got = memo["got"] = None if lib or (mesh and not out) else out
    return got


def nccl_only(hub, view, call: ast.Call, op: str, more=()) -> bool:
    """The process group of the collective ``call`` runs NCCL alone (module docstring); the
    default group's inits are those visible from ``view`` and from the views ``more`` (the modules
    of its callers)."""
    from .origins import origins
    from .sync import group_expr

    g = group_expr(call, op)
    if g is False:
        return False
    if g is not None and (view.sem.qualname(g) or "") not in WORLD_GROUPS:
        got = origins(hub, view, g, call)
        if not got:
            return False
        default = False
        for v, e in got:
            if not (isinstance(e, ast.Call) and v.sem.call_qualname(e) == NEW_GROUP):
                return False
            b = get_arg(e, 2, "backend")
            if b is None:
                default = True
            elif not _nccl_expr(hub, v, b, e):
                return False
        if not default:
            return True
    return default_nccl_only(hub, (view, *more)) is not None


def default_nccl_only(hub, views) -> list | None:
    """The ``init_process_group`` calls (view, call) visible from ``views`` (a module and the
    modules of its callers), when there is one and every one makes an NCCL-only default group (no
    CPU backend); else None."""
    inits = []
    for v in views:
        got = visible_inits(hub, v)
        if got is None:
            return None
        inits.extend(x for x in got if x not in inits)
    ok = bool(inits) and all(_nccl_expr(hub, v, get_arg(c, 0, "backend"), c) for v, c in inits)
    return inits if ok else None


def completed_by_device_sync(hub, view, call: ast.Call, op: str, callers=None, nccl: bool = True):
    """The device-wide synchronisation that every path from ``call`` (a collective made with
    ``async_op=True`` whose handle is dropped or never read) reaches before anything reads its
    tensors (``sync.completed_by``), when its group runs NCCL alone; None otherwise.

    When the function of ``call`` ends with the collective pending (nothing after it reads the
    tensors), its callers may complete it: ``callers(view, fn)`` gives the (view, call) of every
    call of ``fn`` (None when they cannot all be seen: a hook, a callback, a spawned function), and
    each of them must be followed by a device synchronisation in the same way (a caller in this
    module may leave it to its own callers in turn, two levels up). The process groups visible
    from every module on the way must be NCCL-only (not asked with ``nccl=False``)."""
    from .sync import completed_by

    views = [view]

    def pending(depth):
        def at_end(fn):
            sites = callers(view, fn) if callers is not None and depth < 3 else None
            if not sites:
                return None
            last = None
            for cv, site in sites:
                if cv is not view and cv not in views:
                    views.append(cv)
                nxt = pending(depth + 1) if cv is view else None
                last = completed_by(site, _device_sync(hub, cv), nxt)
                if last is None:
                    return None
            return last
        return at_end

    done = completed_by(call, _device_sync(hub, view), pending(0))
    if done is None or nccl and not nccl_only(hub, view, call, op, views[1:]):
        return None
    return done


def _device_sync(hub, view):
    def device_sync(st):
        if isinstance(st, ast.Expr) and isinstance(st.value, ast.Call) and syncs_device(hub, view, st.value):
            return st.value
        return None
    return device_sync
