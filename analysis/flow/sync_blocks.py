"""DDP's ``no_sync()`` blocks, and the forward whose value a ``backward()`` differentiates.

DDP decides in its forward whether the next backward all-reduces, so a ``no_sync()`` block only
matters if it holds the forward of the wrapper. Two questions, by value flow:

- ``no_sync_blocks``: the ``with`` statements of a module that enter ``X.no_sync()``: directly,
  through a name bound once in the function to an expression one of whose values is
  ``X.no_sync()`` (``ctx = X.no_sync() if not last else nullcontext()``, also one element of a
  tuple assignment), or through a project function whose ``return`` gives one
  (``with self._window(last):``; ``X`` read in the caller's terms: the argument bound to a
  parameter, or ``self.<attr>`` for a ``self.m()`` call).
- ``forwards_feeding``: the forwards of the DDP wrapper that the value a ``backward()`` call
  differentiates is computed from: sliced back through the plain assignments of its function
  (``return_deps.names_reaching``) to the calls it is computed from, one of which calls a value that
  may be the wrapper, hands one to a helper, or calls a project function whose body makes such a
  forward (``loss = self._compute(batch)``); where the value arrives through a parameter, at each
  call of the function (in its module, and in other modules through ``callers``), from the
  argument it binds, one caller further. Each forward comes with the (path, line, column) keys of the
  ``DDP(...)`` constructions it may run, and whether a ``no_sync()`` block of one of them holds it
  (in its function, or around the call of the helper that runs it).
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, iter_scope_nodes, parent
from .helper_calls import bind_args
from .return_deps import names_reaching, target_names
from .training_loops import callee_function

_DDP = "torch.nn.parallel.DistributedDataParallel"
_MAX_DEPTH = 2


def _key(view, call) -> tuple:
    return (view.path, call.lineno, call.col_offset)


def wrapper_keys(hub, view, expr, at, frames=None) -> frozenset:
    """The keys of the ``DDP(...)`` constructions ``expr`` (a name or ``self.<attr>``) may hold at
    ``at``."""
    from .wrapped import wrap_origins  # lazy: wrapped asks origins, which is heavier than this module

    if not (isinstance(expr, ast.Name) or isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name)
            and expr.value.id == "self"):
        return frozenset()
    wraps, _always = wrap_origins(hub, view, expr, at, ordered=False, frames=frames)
    return frozenset(_key(v, c) for v, c in wraps if (v.sem.call_qualname(c) or "") == _DDP)


def _no_sync_call(e):
    """``X.no_sync()`` (no arguments): its holder ``X``; else None."""
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr == "no_sync" \
            and not e.args and not e.keywords and isinstance(e.func.value, (ast.Name, ast.Attribute)):
        return e.func.value
    return None


def _values(e):
    """The values an expression may take: both branches of a conditional expression, the operands
    of ``and``/``or``."""
    if isinstance(e, ast.IfExp):
        return [*_values(e.body), *_values(e.orelse)]
    if isinstance(e, ast.BoolOp):
        return [v for x in e.values for v in _values(x)]
    return [e]


def bound_part(target, value, name: str):
    """What ``target = value`` binds to ``name``: ``value``, or its element when both are tuples
    (``ctx, last = (a, b)``); None when it cannot be told."""
    if isinstance(target, ast.Name):
        return value if target.id == name else None
    if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)) \
            and len(target.elts) == len(value.elts) and not any(isinstance(x, ast.Starred) for x in target.elts):
        for t, v in zip(target.elts, value.elts):
            got = bound_part(t, v, name)
            if got is not None:
                return got
    return None


def _entered(hub, view, e, at):
    """(holder in the caller's terms or None, the ``no_sync()`` call) when the context expression
    ``e`` of a ``with`` at ``at`` enters ``X.no_sync()``; None when it does not."""
    for v in _values(e):
        h = _no_sync_call(v)
        if h is not None:
            return h, v
    if isinstance(e, ast.Name):
        fn = view.sem.enclosing_function(at)
        binds = view.sem.assignments(fn if fn is not None else view.tree).get(e.id, ())
        if len(binds) != 1 or not isinstance(binds[0], ast.Assign) or len(binds[0].targets) != 1:
            return None
        val = bound_part(binds[0].targets[0], binds[0].value, e.id)
        for v in _values(val) if val is not None else ():
            h = _no_sync_call(v)
            if h is not None:
                return h, v
        return None
    if not (isinstance(e, ast.Call) and isinstance(e.func, (ast.Name, ast.Attribute))):
        return None
    try:
        got = hub.resolve_call(view, e)
    except Exception:  # noqa: BLE001 - an unresolvable call is simply not followed
        got = None
    if got is None or not isinstance(got[1], FUNC_TYPES):
        return None
    fn = got[1]
    for r in iter_scope_nodes(fn):
        if not isinstance(r, ast.Return) or r.value is None:
            continue
        for v in _values(r.value):
            h = _no_sync_call(v)
            if h is None:
                continue
            if isinstance(h, ast.Name):
                return bind_args(e, fn).get(h.id), v
            self_call = isinstance(e.func, ast.Attribute) and isinstance(e.func.value, ast.Name) \
                and e.func.value.id == "self" and got[0] is view
            if self_call and isinstance(h.value, ast.Name) and h.value.id == "self":
                return ast.copy_location(ast.Attribute(value=e.func.value, attr=h.attr, ctx=ast.Load()), e), v
            return None, v
    return None


def no_sync_blocks(hub, view) -> list:
    """(``with`` statement, holder expression in its terms or None, the ``no_sync()`` call) for each
    ``with`` of ``view`` that enters a ``no_sync()`` context."""
    memo = view.memo.setdefault("sync_blocks.blocks", {})
    if "all" not in memo:
        out = []
        for w in view.sem.by_type.get(ast.With, ()):
            for item in w.items:
                got = _entered(hub, view, item.context_expr, w)
                if got is not None:
                    out.append((w, got[0], got[1]))
                    break
        memo["all"] = out
    return memo["all"]


def covered(hub, view, node, keys) -> bool:
    """A ``no_sync()`` block of ``view`` holds ``node``, on a holder that may be one of the wrappers
    ``keys`` (``refs``), or whose wrapper cannot be told (an unknown holder covers: nothing is
    claimed)."""
    blocks = {id(w): h for w, h, _c in no_sync_blocks(hub, view)}
    for a in view.sem.ancestors(node):
        if isinstance(a, FUNC_TYPES):
            return False
        h = blocks.get(id(a), 0) if isinstance(a, ast.With) else 0
        if h == 0:
            continue
        if h is None:
            return True
        got = refs(hub, view, h, a, True)
        if not got or got & keys:
            return True
    return False


def _feeding_calls(view, seeds, scope):
    """(calls whose values reach ``seeds`` in ``scope``, names reaching them)."""
    stmts = [s for s in iter_scope_nodes(scope) if isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign))]
    names = names_reaching(seeds, stmts)
    calls = [c for e in seeds for c in ast.walk(e) if isinstance(c, ast.Call)]
    for s in stmts:
        if s.value is not None and target_names(s) & names:
            calls.extend(c for c in ast.walk(s.value) if isinstance(c, ast.Call))
    return calls, names


def _self_attr(e):
    if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
        return ("self", e.attr)
    return None


def _self_call(view, c, tv) -> bool:
    """``self.m(...)`` resolved in the same module: the callee runs on the same instance."""
    return isinstance(c.func, ast.Attribute) and isinstance(c.func.value, ast.Name) and c.func.value.id == "self" \
        and tv is view


def refs(hub, view, expr, at, same_self: bool) -> frozenset:
    """What identifies the wrapper ``expr`` may hold: the keys of its ``DDP(...)`` constructions,
    and, while the question stays on one instance (``same_self``), ``("self", attr)`` for
    ``self.<attr>``."""
    got = wrapper_keys(hub, view, expr, at)
    a = _self_attr(expr)
    return got | {a} if same_self and a is not None else got


def _forward_of(hub, view, c, same_self):
    """(what identifies the wrappers ``c`` runs the forward of, whether a ``no_sync()`` block inside
    the helper it calls holds that forward): ``model(x)``, ``compute_loss(model, x)``, or a call of
    a project function whose body calls such a value (``self._compute(batch)``)."""
    fn, tv = callee_function(hub, view, c)
    got = refs(hub, view, c.func, c, same_self) if fn is None else frozenset()
    for a in (*c.args, *(k.value for k in c.keywords)):
        got |= refs(hub, view, a, c, same_self)
    if got or fn is None:
        return got, False
    inner_self = same_self and _self_call(view, c, tv)
    inner, held = frozenset(), True
    for x in iter_scope_nodes(fn):
        if isinstance(x, ast.Call):
            k = refs(hub, tv, x.func, x, inner_self)
            if k:
                inner |= k
                held = held and covered(hub, tv, x, k)
    return inner, bool(inner) and held


def forwards_feeding(hub, view, b, callers=None) -> list:
    """[(view, forward call, identities, held)] for the forwards of a wrapper that the value the
    ``backward`` call ``b`` differentiates is computed from, in its function and, through its
    parameters, at the calls of that function (``callers(view, fn)``: (view, call) pairs of other
    modules). The identities are ``refs``' (``("self", attr)`` only while every call on the way is a
    ``self.m()`` call of ``b``'s instance). ``held``: a ``no_sync()`` block holds the forward."""
    return _feeding(hub, view, b, [b], callers, 0, set(), True)


def _feeding(hub, view, at, seeds, callers, depth, seen, same_self) -> list:
    fn = view.sem.enclosing_function(at)
    scope = fn if fn is not None else view.tree
    key = (id(scope), tuple(id(s) for s in seeds))
    if key in seen:
        return []
    seen.add(key)
    calls, names = _feeding_calls(view, seeds, scope)
    out = []
    for c in calls:
        if c is at and depth == 0:
            continue  # the backward itself
        got, held = _forward_of(hub, view, c, same_self)
        if got:
            out.append((view, c, got, held or covered(hub, view, c, got)))
    if fn is None or depth >= _MAX_DEPTH or not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return out
    params = {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}
    rebound = view.sem.assignments(fn)
    live = [p for p in names & params if not rebound.get(p) and p not in ("self", "cls")]
    if not live:
        return out
    sites = [(view, s) for s in hub.call_sites(view, fn)]
    if callers is not None:
        sites += [(v, s) for v, s in callers(view, fn) if v is not view]
    for sv, site in sites:
        args = bind_args(site, fn)
        arg = [args[p] for p in live if p in args]
        if arg:
            out += _feeding(hub, sv, site, arg, callers, depth + 1, seen, same_self and _self_call(sv, site, view))
    return out


def in_block(node, w) -> bool:
    return any(a is w for a in _ancestors(node))


def _ancestors(node):
    p = parent(node)
    while p is not None:
        yield p
        p = parent(p)
