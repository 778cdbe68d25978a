"""A dict read key by key: the value stored under one constant key (a record whose fields have
their own kinds).

``info["save_every"]`` where ``info`` also holds this rank's loss under ``info["loss"]`` is as
uniform as what was stored under ``"save_every"``: the evaluator's plain answer for a subscript
joins the whole container (every value ever put into it) with the key. ``field(ev, e, d)`` answers
for ``x["k"]`` (``x`` a name, ``"k"`` a string constant) by following only what can sit under
``"k"``:

- a dict display binding ``x`` gives its entry for ``"k"`` (none: the key is absent, so nothing of
  the display reaches the read), ``dict(k=v)`` its keyword;
- a call of a project function binding ``x`` (also one element of a tuple it returns) gives the
  entry of each ``return``: a display, a local name followed the same way in the callee, or a
  parameter of the callee returned as it came (``def step(state): state["lr"] = ...; return
  state``), which is the caller's argument read at the same key;
- the writes into ``x`` between its binding and the read (``mutations``) add what they store under
  ``"k"`` (a store under another constant key adds nothing, one under a computed key or a call
  that stores into it, ``update``, its stored values); a fresh container handed to a call that
  may fill it (``written_values``) leaves the whole question to the evaluator.

Anything else a binding holds (a parameter outside such a call, a library call, a loop variable)
falls back to the evaluator's value of the whole binding, so the answer is never more uniform than
what can be stored under the key; None (the plain answer) where the name is not a local one.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, iter_scope_nodes
from .bindings import binding_scope, reaching, target_path
from .calls import call_args
from .mutations import bound_part, index, is_container_binding, mutations
from .values import U, join

_MAX = 24  # names and calls followed in one query (a chain of helpers that return their parameter)


def field(ev, e: ast.Subscript, d: int):
    """The uniformity of ``x["k"]`` for the evaluator ``ev`` (see the module docstring); None when
    ``e`` is not such a read."""
    sl = e.slice
    if not (isinstance(e.value, ast.Name) and isinstance(sl, ast.Constant) and isinstance(sl.value, str)):
        return None
    kind, _ = reaching(ev.view, e.value.id, e.value)
    if kind != "events":
        return None
    try:
        return _name(ev, e.value, sl.value, d, 0, {})
    except _Unkeyed:
        return None


class _Unkeyed(Exception):
    """A container on the way was handed to a call that may fill it: what sits under the key is
    the evaluator's question for the whole container (its answer also counts what the calls were
    given), not one this module can narrow."""


def _name(ev, x: ast.Name, key: str, d: int, depth: int, seen: dict):
    """A name met again in the same query (a loop carries the dict around) adds nothing beyond
    what its other bindings add: uniform while it is being answered. ``seen`` lives for one query
    only, so an answer cut short by that never outlives it."""
    k = (id(ev), id(x))
    got = seen.get(k)
    if got is not None:
        return got
    seen[k] = U
    got = seen[k] = _name_uncached(ev, x, key, d, depth, seen)
    return got


def _name_uncached(ev, x: ast.Name, key: str, d: int, depth: int, seen: dict):
    kind, evs = reaching(ev.view, x.id, x)
    if kind not in ("events", "events+param") or not evs:
        return ev.value(x, d + 1)
    vals = []
    if kind == "events+param":  # a loop that rebinds a parameter: the parameter on the first trip
        vals.append(ev.param_value(binding_scope(ev.sem, x), x.id, x))
    for b in evs:
        v = bound_part(b, x.id)
        if isinstance(b, ast.Assign) and (c := ev._control_dependent(b, d, x.id)) is not None:
            vals.append(c)  # which binding holds depends on this rank's data
        elif v is not None:
            vals.append(_expr(ev, v, key, d, depth, seen))
        elif isinstance(b, ast.Assign) and len(b.targets) == 1 and isinstance(b.value, ast.Call):
            path = target_path(b.targets[0], x.id)
            got = _call(ev, b.value, path, key, d, depth, seen) if path is not None else None
            vals.append(got if got is not None else ev.binding_value(b, x.id, d + 1))
        else:
            vals.append(ev.binding_value(b, x.id, d + 1))
    more = _stored(ev, x, evs, key, d)
    if more is None:
        raise _Unkeyed
    vals.extend(more)
    return join(vals)


def _stored(ev, x: ast.Name, evs, key: str, d: int) -> list | None:
    """What the writes into ``x`` after ``evs`` may store under ``key``; None when a fresh
    container is handed to a call that may fill it (``written_values``: what the call stores is
    the evaluator's question, not one of keys)."""
    out, fresh = [], None
    for node, values in mutations(ev.view, x.id, x, evs):
        if values is None:  # handed to a call
            if fresh is None:
                fresh = any(is_container_binding(ev.sem, b) for b in evs)
            if fresh and _may_fill(ev, node, x.id):
                return None
            continue
        if isinstance(node, ast.Call):
            recv = node.func.value
            if isinstance(recv, ast.Subscript) and _other_key(recv, x.id, key):
                continue  # ``x["other"].append(v)``
            if node.func.attr == "update" and isinstance(recv, ast.Name) and len(node.args) == 1 \
                    and not node.keywords and isinstance(node.args[0], ast.Dict):
                out.extend(_entry(ev, node.args[0], key, d))
                continue
            out.extend(ev.value(v, d + 1) for v in values)
            continue
        tgts = node.targets if isinstance(node, ast.Assign) else (node.target,)
        if all(_other_key(t, x.id, key) for t in tgts):
            continue  # ``x["other"] = v``, ``x["other"][i] = v``
        out.extend(ev.value(v, d + 1) for v in values)
    return out


def _may_fill(ev, call: ast.Call, name: str) -> bool:
    """The call that receives the container ``name`` may store into it: a project function that
    writes into the parameter it arrives as (``index``), or a call of unknown origin; a library's
    function (``wandb.log(logs)``, ``print``) only reads what it is given."""
    target = ev.hub.resolve_call(ev.view, call)
    if target is None:
        return (ev.sem.call_qualname(call) or "").partition(".")[0] in ("", "self", "cls")
    tv, fn = target
    if not isinstance(fn, FUNC_TYPES):
        return True
    writes = index(tv)
    return any(isinstance(a, ast.Name) and a.id == name and writes.get((fn, p))
               for p, a in call_args(call, fn)) or any(isinstance(a, ast.Starred) for a in call.args)


def _other_key(t: ast.AST, name: str, key: str) -> bool:
    """``t`` is a store into ``name`` under a constant key other than ``key``."""
    while isinstance(t, (ast.Subscript, ast.Attribute)):
        if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == name:
            s = t.slice
            return isinstance(s, ast.Constant) and isinstance(s.value, str) and s.value != key
        t = t.value
    return False


def _entry(ev, v: ast.Dict, key: str, d: int) -> list:
    out = []
    for k, val in zip(v.keys, v.values):
        if k is None:
            out.append(ev.value(val, d + 1))  # ``**other``: any of its keys
        elif isinstance(k, ast.Constant) and k.value == key:
            out.append(ev.value(val, d + 1))
        elif not (isinstance(k, ast.Constant) and isinstance(k.value, str)):
            out.append(ev.value(val, d + 1))  # a computed key may be ``key``
    return out


def _expr(ev, v: ast.AST, key: str, d: int, depth: int, seen: dict):
    if isinstance(v, ast.Dict):
        got = _entry(ev, v, key, d)
        return join(got) if got else U
    if isinstance(v, ast.Call) and not v.args and isinstance(v.func, ast.Name) and v.func.id == "dict" \
            and ev.sem.qualname(v.func) is None and all(k.arg is not None for k in v.keywords):
        return join(ev.value(k.value, d + 1) for k in v.keywords if k.arg == key) if any(
            k.arg == key for k in v.keywords) else U
    if isinstance(v, ast.Name) and depth < _MAX:
        return _name(ev, v, key, d, depth + 1, seen)
    if isinstance(v, ast.Call):
        got = _call(ev, v, [], key, d, depth, seen)
        if got is not None:
            return got
    return ev.value(v, d + 1)


def _call(ev, call: ast.Call, path, key: str, d: int, depth: int, seen: dict):
    """``key`` of what the project function ``call`` runs returns (at ``path`` of a tuple), or None."""
    if depth >= _MAX:
        return None
    target = ev.hub.resolve_call(ev.view, call)
    if target is None or not isinstance(target[1], FUNC_TYPES):
        return None
    tv, fn = target
    rets = [r.value for r in iter_scope_nodes(fn) if isinstance(r, ast.Return) and r.value is not None]
    if not rets or any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in iter_scope_nodes(fn)):
        return None
    ctx = ev.hub.call_context(ev.view, call, target, ev.ctx, want_wraps=False)
    tev = ev.hub.evaluator(tv, ctx)
    args = dict(call_args(call, fn))
    vals = []
    for r in rets:
        p = list(path)
        while p and isinstance(r, ast.Tuple) and len(r.elts) > p[0] \
                and not any(isinstance(x, ast.Starred) for x in r.elts):
            r, p = r.elts[p[0]], p[1:]
        if p:
            return None
        if isinstance(r, ast.Name):
            kind, fnode = reaching(tv, r.id, r)
            if kind == "param" and fnode is fn:
                a = args.get(r.id)  # the argument, as it came, with what the callee stored into it
                if a is None:
                    return None
                more = _stored(tev, r, [fn], key, d)
                if more is None:
                    raise _Unkeyed
                vals.append(_expr(ev, a, key, d, depth + 1, seen))
                vals.extend(more)
                continue
        vals.append(_expr(tev, r, key, d, depth + 1, seen))
    return join(vals)
