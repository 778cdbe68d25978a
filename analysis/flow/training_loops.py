"""Training loops: does a loop's round run ``backward()`` on a value computed from the forward of a
module that may be the ``DistributedDataParallel`` wrapper, in the loop's body or in the project
functions it calls (up to ``MAX_CALLS`` calls deep, in this module or another, methods through
``self.m()``)?

The question a data rule asks of the loop that walks a loader (``passes.Pass.walker``): is this
the loader the model trains on, or one it only evaluates on? Names decide nothing here: an
evaluation loop is one whose rounds run no such ``backward()``.

The backward's value is sliced back through the plain assignments of its function
(``return_deps.names_reaching``, a superset: order is ignored) to the calls it is computed from;
one of them must be a forward of a value that may hold the wrapper (``wrapped.wrap_origins``), or
a call that hands such a value to a helper (``loss = compute_loss(model, batch)``), or a call of a
project function whose own body makes such a forward (``loss = self.step(batch)``). A callee's
parameter is read as the call that reached it binds it (``origins``' frames), so
``train_step(ddp_model, batch)`` in another module sees the caller's wrapper.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, iter_scope_nodes, parent
from .passes import _nodes
from .return_deps import names_reaching, output_names, target_names

MAX_CALLS = 3
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_SCOPES = (*FUNC_TYPES, ast.Lambda, ast.ClassDef)


def walking_loop(view, node):
    """The loop whose rounds take the items of the walk at ``node`` (``passes.Pass.walker``): a
    ``for`` loop itself; for ``it = iter(loader)``, the innermost loop of its function that calls
    ``next(it)``, else the loop around the ``iter`` call; None for anything else."""
    if isinstance(node, (ast.For, ast.AsyncFor)):
        return node
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "iter"):
        return None
    st = parent(node)
    if isinstance(st, ast.Assign) and st.value is node and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
        name = st.targets[0].id
        fn = view.sem.enclosing_function(node)
        for c in iter_scope_nodes(fn if fn is not None else view.tree):
            if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id == "next" and c.args \
                    and isinstance(c.args[0], ast.Name) and c.args[0].id == name:
                loop = _loop_around(c)
                if loop is not None:
                    return loop
    return _loop_around(node)


def _loop_around(node):
    p = parent(node)
    while p is not None and not isinstance(p, _SCOPES):
        if isinstance(p, _LOOPS):
            return p
        p = parent(p)
    return None


def trains(hub, view, loop, frames=()) -> tuple | None:
    """(view, ``backward()`` call) when a round of ``loop`` (of ``view``) runs ``backward()`` on a
    value computed from a forward of a module that may be the DDP wrapper; else None. ``frames``:
    the calls that lead to ``loop``'s function (``passes.Pass.frames``)."""
    memo = view.memo.setdefault("training_loops.trains", {})
    key = (id(loop), tuple(id(c) for _f, c, _v in frames))
    if key not in memo:
        memo[key] = None  # a recursive question adds nothing
        body = [*loop.body, *getattr(loop, "orelse", [])]
        memo[key] = _scan(hub, view, body, tuple(frames), 0, frozenset())
    return memo[key]


def is_backward(view, c) -> bool:
    """``x.backward()`` (also ``scaler.scale(loss).backward()``) or ``torch.autograd.backward(x)``."""
    if not isinstance(c, ast.Call):
        return False
    f = c.func
    if isinstance(f, ast.Attribute) and f.attr == "backward":
        return (view.sem.call_qualname(c) or "torch.autograd.backward") == "torch.autograd.backward" \
            or isinstance(f.value, ast.Call) or view.sem.qualname(f.value) is None
    return (view.sem.call_qualname(c) or "") == "torch.autograd.backward"


def _scan(hub, view, stmts, frames, depth, active):
    for n in _nodes(stmts, into_loops=True):
        if not isinstance(n, ast.Call):
            continue
        if is_backward(view, n):
            if _from_ddp_forward(hub, view, n, frames):
                return view, n
            continue
        if depth >= MAX_CALLS:
            continue
        fn, tv = callee_function(hub, view, n)
        if fn is None or id(fn) in active:
            continue
        got = _scan(hub, tv, fn.body, (*frames, (fn, n, view)), depth + 1, active | {id(fn)})
        if got is not None:
            return got
    return None


def callee_function(hub, view, call):
    """(function, its view) of the project function ``call`` runs (not a constructor), else
    (None, None)."""
    try:
        got = hub.resolve_call(view, call)
    except Exception:  # noqa: BLE001 - an unresolvable call is simply not followed
        got = None
    if got is None or not isinstance(got[1], FUNC_TYPES) or got[1].name == "__init__":
        return None, None
    return got[1], got[0]


def _from_ddp_forward(hub, view, b, frames, depth: int = 0) -> bool:
    """The value ``b`` (a ``backward`` call) differentiates is computed, in its function, from a
    call of a value that may hold the DDP wrapper, a call that hands one to a helper, or a call of
    a project function that makes such a forward itself."""
    scope = view.sem.enclosing_function(b) or view.tree
    stmts = [s for s in iter_scope_nodes(scope) if isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign))]
    names = names_reaching([b], stmts)
    calls = [c for c in ast.walk(b) if isinstance(c, ast.Call) and c is not b]
    for s in stmts:
        if s.value is not None and target_names(s) & names:
            calls.extend(c for c in ast.walk(s.value) if isinstance(c, ast.Call))
    return any(_ddp_call(hub, view, c, frames, depth) for c in calls)


def _holder(e) -> bool:
    return isinstance(e, ast.Name) or (isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name)
                                       and e.value.id == "self")


def _may_be_ddp(hub, view, e, at, frames) -> bool:
    from .wrapped import wrap_origins  # lazy: wrapped asks origins, which is heavier than this module

    if not _holder(e):
        return False
    wraps, _always = wrap_origins(hub, view, e, at, ordered=False, frames=frames)
    return any((v.sem.call_qualname(c) or "") == "torch.nn.parallel.DistributedDataParallel" for v, c in wraps)


def _ddp_call(hub, view, c, frames, depth) -> bool:
    if _may_be_ddp(hub, view, c.func, c, frames):
        return True  # ``model(x)``: the wrapper's forward
    if any(_may_be_ddp(hub, view, a, c, frames) for a in (*c.args, *(k.value for k in c.keywords))):
        return True  # ``compute_loss(model, batch)``: the wrapper handed to a helper
    if depth >= 1:
        return False
    fn, tv = callee_function(hub, view, c)
    if fn is None:
        return False
    inner = (*frames, (fn, c, view))
    return any(isinstance(r, ast.Return) and r.value is not None and any(
        isinstance(x, ast.Call) and _ddp_call(hub, tv, x, inner, depth + 1) for x in ast.walk(r.value))
        for r in iter_scope_nodes(fn)) or any(
        isinstance(x, ast.Call) and _may_be_ddp(hub, tv, x.func, x, inner) for x in iter_scope_nodes(fn))


def backward_reached(hub, view, node, callers=None, depth: int = 0) -> tuple | None:
    """(view, ``backward()`` call) of a backward that the value of ``node`` (an expression of a
    function) reaches: in its function, bound by its statement to a name the backward's receiver or
    arguments are computed from (``return_deps.names_reaching``, a superset: order is ignored); or,
    where the value reaches what the function returns (``return_deps.output_names``), at a call of
    the function whose value reaches one (``loss = self.compute_loss(batch); loss.backward()``), up
    to ``MAX_CALLS`` returns up: the calls of its module (``hub.call_sites``) and ``callers(view,
    fn)``'s of other modules. None when none is found."""
    fn = view.sem.enclosing_function(node)
    scope = fn if fn is not None else view.tree
    b = _backward_in(view, node, scope)
    if b is not None:
        return view, b
    if depth >= MAX_CALLS or not isinstance(fn, FUNC_TYPES) or not reaches_return(view, node, fn):
        return None
    sites = [(view, s) for s in hub.call_sites(view, fn)]
    if callers is not None:
        sites += [(v, s) for v, s in callers(view, fn) if v is not view]
    for sv, site in sites:
        got = backward_reached(hub, sv, site, callers, depth + 1)
        if got is not None:
            return got
    return None


def _statement(node):
    p = parent(node)
    while p is not None and not isinstance(p, ast.stmt):
        yield p
        p = parent(p)
    yield p


def _backward_in(view, node, scope):
    """The ``backward`` call of ``scope`` that ``node``'s value reaches: inside it, or through the
    names its statement binds."""
    backs = [c for c in iter_scope_nodes(scope) if isinstance(c, ast.Call) and is_backward(view, c)]
    if not backs:
        return None
    st = None
    for p in _statement(node):
        if any(p is b for b in backs):
            return p
        st = p
    if not isinstance(st, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        return None
    bound = target_names(st)
    stmts = [s for s in iter_scope_nodes(scope) if isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign))]
    return next((b for b in backs if bound & names_reaching([b], stmts)), None)


def reaches_return(view, node, fn) -> bool:
    """``node``'s value may be what ``fn`` returns: inside a ``return``, or bound by its statement to
    a name the returned values are computed from."""
    st = None
    for p in _statement(node):
        st = p
    if isinstance(st, ast.Return):
        return True
    if not isinstance(st, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        return False
    return bool(target_names(st) & _returned_names(view, fn))


def _returned_names(view, fn) -> frozenset:
    """``output_names`` of ``fn``, once per function (empty when it cannot tell)."""
    memo = view.memo.setdefault("training_loops.returned", {})
    got = memo.get(id(fn))
    if got is None or got[0] is not fn:
        got = memo[id(fn)] = (fn, output_names(fn) or frozenset())
    return got[1]
