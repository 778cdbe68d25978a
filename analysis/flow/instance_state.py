"""State that a method call leaves in an object: ``stopper.step(val_loss)`` then ``if stopper.stop:``.

An attribute read ``<recv>.<attr>`` (``recv`` a name, ``self`` or ``self.<x>``) is rank-varying
when a call ``<recv>.<m>(...)`` of the same function runs a project method that stores
``self.<attr>`` rank-varying *as that call runs it* (the call's arguments bound into the method's
parameters, ``context.call_context``): a value computed from this rank's data, or any value stored
only where a test on such a value holds (``if value < self.best: ... else: self.wait += 1; if
self.wait >= self.patience: self.stop = True``), or after such a test may have returned early.
Attributes of ``self`` that the method (or a method it calls on ``self``) made rank-varying that way
carry it into the later stores and tests of the method (``self.wait`` above). An early-stopping
object, a meter, a patience counter: each rank's own unless the value was reduced first.

Nothing here reports a finding; the uniformity evaluator asks ``state_value`` (through the hub's
``field_value``) for an attribute read it cannot otherwise judge.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, iter_scope_nodes, parent
from .records import function_name
from .values import X, Value, summary

_MAX_DEPTH = 2
_EXITS = (ast.Return, ast.Raise)


def _recv_key(e: ast.AST):
    """``x`` / ``self`` / ``self.x``: the receiver as a comparable key, else None."""
    if isinstance(e, ast.Name):
        return (e.id,)
    if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
        return ("self", e.attr)
    return None


def state_value(hub, view, e: ast.Attribute, d: int, ctx=None):
    """The rank-varying value of ``e`` (``<recv>.<attr>``) that a method call on the same receiver
    earlier in its function stores (see the module's docstring); else None."""
    key = _recv_key(e.value)
    if key is None:
        return None
    if d > 30:
        hub.cut_state.n += 1  # a depth cap: an answer made of it is not memoised for good
        return None
    fn = view.sem.enclosing_function(e)
    if key == ("self",) and fn is not None and isinstance(parent(fn), ast.ClassDef):
        got = _own_store(hub, view, fn, e, ctx)
        if got is not None:
            return got
    for c in _method_calls(view, fn if fn is not None else view.sem.tree).get(key, ()):
        f = c.func
        if c is parent(e):
            continue
        target = hub.resolve_call(view, c)
        if target is None or not isinstance(target[1], FUNC_TYPES) or not isinstance(parent(target[1]), ast.ClassDef):
            continue
        got = _varying_attrs(hub, view, c, target, ctx, 0).get(e.attr)
        if got is not None:
            return Value("V", got.src.step(f"which `{ast.unparse(f)}()` at line {c.lineno} stores in "
                                           f"`{ast.unparse(e)}`"))
    return None


def _own_store(hub, view, fn, e: ast.Attribute, ctx):
    """The rank-varying value that the method ``fn`` itself stores in ``self.<attr>`` before the read
    ``e`` (``if val_loss <= self.target: self.stop = True`` then ``return self.stop``), as ``fn`` runs
    under the evaluator's context ``ctx`` (a call's arguments bound); else None."""
    if not any(isinstance(a, ast.Attribute) and a.attr == e.attr and isinstance(a.ctx, ast.Store)
               and isinstance(a.value, ast.Name) and a.value.id == "self" and a.lineno < e.lineno
               for a in _self_stores(view, fn)):
        return None
    memo = (ctx.memo if ctx is not None else view.memo).setdefault("instance_state.own", {})
    got = summary(hub.cut_state, memo, id(fn), lambda: _compute(hub, view, fn, ctx, 0), {}).get(e.attr)
    if got is None:
        # a store under a test the evaluator cannot judge here (on a parameter, with no call's
        # context): what the read gives is not known; a call's context may tell (``_returns``)
        ev = hub.evaluator(view, ctx)
        for a in _self_stores(view, fn):
            if a.attr == e.attr and a.lineno < e.lineno and isinstance(a.value, ast.Name) and a.value.id == "self":
                p = parent(a)
                while p is not None and p is not fn:
                    if isinstance(p, (ast.If, ast.While)) and ev.value(p.test).kind == "X":
                        return X
                    p = parent(p)
        return None
    return Value("V", got.src.step(f"which `{function_name(fn)}()` stores in `self.{e.attr}` before"))


def _self_stores(view, fn) -> list:
    """The ``self.<attr>`` store targets of ``fn`` (its own scope), once per function."""
    memo = view.memo.setdefault("instance_state.stores", {})
    got = memo.get(id(fn))
    if got is None:
        got = memo[id(fn)] = [a for n in iter_scope_nodes(fn) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
                              for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                              for a in ast.walk(t) if isinstance(a, ast.Attribute) and isinstance(a.ctx, ast.Store)]
    return got


def _method_calls(view, scope) -> dict:
    """{receiver key: the calls ``<recv>.<m>(...)`` of ``scope``}, once per scope."""
    memo = view.memo.setdefault("instance_state.calls", {})
    got = memo.get(id(scope))
    if got is None:
        got = memo[id(scope)] = {}
        for c in view.sem.scope_calls(scope):
            if isinstance(c.func, ast.Attribute) and (k := _recv_key(c.func.value)) is not None:
                got.setdefault(k, []).append(c)
    return got


def _varying_attrs(hub, view, call, target, pctx, depth: int) -> dict:
    """{attribute of ``self``: its rank-varying value} that ``target`` (a method) stores when
    ``call`` runs it (in ``view``, analysed under ``pctx``)."""
    tv, mfn = target
    if depth > _MAX_DEPTH:
        return {}
    cctx = hub.call_context(view, call, target, pctx, want_wraps=False)
    memo = (cctx.memo if cctx is not None else tv.memo).setdefault("instance_state", {})
    # a method met again while it is in flight reads as storing nothing (a cut: ``values.summary``)
    return summary(hub.cut_state, memo, (id(mfn), depth),
                   lambda: _compute(hub, tv, mfn, cctx, depth), {})


def _compute(hub, tv, mfn, cctx, depth: int) -> dict:
    out: dict = {}
    ev = hub.evaluator(tv, cctx)
    nodes = iter_scope_nodes(mfn)
    stores = []
    for n in nodes:
        if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and n.value is not None:
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                for a in ast.walk(t):
                    if isinstance(a, ast.Attribute) and isinstance(a.value, ast.Name) and a.value.id == "self" \
                            and isinstance(a.ctx, ast.Store):
                        stores.append((a.attr, n))
    inner = [c for c in nodes if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
             and isinstance(c.func.value, ast.Name) and c.func.value.id == "self"]
    for _ in range(4):
        before = len(out)
        for c in inner:  # ``self.update_best(value)``: what it stores, as this method calls it
            t = hub.resolve_call(tv, c)
            if t is not None and t[1] is not mfn and isinstance(t[1], FUNC_TYPES):
                for k, v in _varying_attrs(hub, tv, c, t, cctx, depth + 1).items():
                    out.setdefault(k, v)
        for attr, st in stores:
            if attr in out:
                continue
            v = _stored(ev, st, out, mfn)
            if v is not None:
                out[attr] = v
        if len(out) == before:
            break
    return out


def _tainted(ev, e, out: dict):
    """The rank-varying value of expression ``e``: the evaluator's, or a ``self.<attr>`` it reads
    that this method made rank-varying."""
    v = ev.value(e)
    if v.varying:
        return v
    for a in ast.walk(e):
        if isinstance(a, ast.Attribute) and isinstance(a.value, ast.Name) and a.value.id == "self" and a.attr in out:
            return out[a.attr]
    return None


def _stored(ev, st, out: dict, fn):
    """The rank-varying value the store ``st`` leaves: its value, or a test that decides whether it
    runs (an enclosing ``if``/``while``, or an earlier ``if`` of an enclosing block that may return)."""
    if (v := _tainted(ev, st.value, out)) is not None:
        return v
    child, p = st, parent(st)
    while p is not None and p is not fn:
        if isinstance(p, (ast.If, ast.While)) and child is not p.test:
            if (v := _tainted(ev, p.test, out)) is not None:
                return v
        for field in ("body", "orelse"):
            blk = getattr(p, field, None)
            if isinstance(blk, list) and child in blk:
                for prev in blk[:blk.index(child)]:
                    if isinstance(prev, ast.If) and _exits(prev) and (v := _tainted(ev, prev.test, out)) is not None:
                        return v
        child, p = p, parent(p)
    if p is fn:
        for prev in fn.body[:fn.body.index(child)] if child in fn.body else ():
            if isinstance(prev, ast.If) and _exits(prev) and (v := _tainted(ev, prev.test, out)) is not None:
                return v
    return None


def _exits(node: ast.If) -> bool:
    """``node`` may leave its function (a ``return`` or ``raise`` in it, not in a nested function)."""
    stack = [*node.body, *node.orelse]
    while stack:
        n = stack.pop()
        if isinstance(n, _EXITS):
            return True
        if isinstance(n, (*FUNC_TYPES, ast.ClassDef, ast.Lambda)):
            continue
        stack.extend(ast.iter_child_nodes(n))
    return False
