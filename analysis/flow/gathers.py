"""Gathers a helper makes of the sharded module it receives: ``export(model)`` where ``model`` holds
a ``fully_shard`` module and ``export`` turns the DTensors of its state dict or parameters into
whole tensors (``DTensor.full_tensor()``) behind ``if isinstance(t, DTensor):``, also through the
helpers it gives them to. ``hidden.hidden_sites`` makes such a call a collective site (``summaries`` hands it this module's ``helper_gather``)."""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES
from .bindings import _COMPS, comp_binder, reaching
from .hidden import _DTENSOR_MODULES, _call_args, _key, entry_of, is_fsdp2, op_words

_DTENSOR_CLASSES = frozenset(m + ".DTensor" for m in (*_DTENSOR_MODULES, "torch.distributed.tensor._api"))
_SHARDED_ITERS = ("state_dict", "parameters", "named_parameters")


def helper_gather(hub, view, call, Effect, Site):
    """``export(model)`` where ``model`` is an FSDP2 module and the project function ``export``, on
    every call, gathers the DTensors of its parameter's state dict or parameters (``for k, v in
    model.state_dict().items(): v.full_tensor()``, also through helpers that receive ``v``), an
    ``if isinstance(v, DTensor):`` around the gather holding for them: the gather's collective, at
    the call. (A helper that gathers unconditionally is a plain summary's; this is for the guarded
    one, whose guard only the sharded argument decides.)"""
    if not call.args and not call.keywords:
        return None
    if not any(_key(a) is not None and is_fsdp2(hub, view, a, call)
               for a in (*call.args, *(k.value for k in call.keywords))):
        return None
    target = hub.resolve_call(view, call)
    if target is None or not isinstance(target[1], FUNC_TYPES):
        return None
    tv, fn = target
    mods = {p for p, a in _call_args(call, fn) if _key(a) is not None and is_fsdp2(hub, view, a, call)}
    if not mods or hub.summary(tv, fn).must:
        return None
    hub._view_stack.append(tv)  # the modules read become the checked view's dependencies
    try:
        e = _gathers(hub, tv, fn, frozenset(mods), frozenset(), Effect, 0)
    finally:
        hub._view_stack.pop()
    return Site(call, [e.through(fn.name)], "helper") if e is not None else None


def _gathers(hub, view, fn, mods, dts, Effect, depth):
    """The DTensor gather every call of ``fn`` makes when its parameters ``mods`` hold FSDP2
    modules and ``dts`` hold DTensors (an ``Effect``), else None."""
    memo = view.memo.setdefault("gathers.gathers", {})
    key = (fn, mods, dts)
    if key in memo:
        return memo[key]
    memo[key] = None  # recursion guard
    loops = _sharded_loops(view, fn, mods)

    def dtensor(expr, at) -> bool:
        if not isinstance(expr, ast.Name):
            return False
        g = comp_binder(expr)
        if g is not None:
            return _sharded_target(view, g.iter, g.target, mods) == expr.id
        kind, evs = reaching(view, expr.id, at)
        if kind == "param":
            return expr.id in dts
        return kind == "events" and bool(evs) and all(e in loops.get(expr.id, ()) for e in evs)

    def holds(p, child) -> bool:  # ``if isinstance(v, DTensor):`` of a DTensor value, around its body
        if p.__class__ in _COMPS:  # the element of ``{k: v.full_tensor() for k, v in net.state_dict().items()}``
            g = p.generators
            return (child is not g[0] and len(g) == 1 and not g[0].ifs
                    and _sharded_target(view, g[0].iter, g[0].target, mods) is not None)
        if isinstance(p, ast.If):
            if child not in p.body:
                return False
        elif not (isinstance(p, ast.IfExp) and child is p.body):
            return False
        t = p.test
        if not (isinstance(t, ast.Call) and isinstance(t.func, ast.Name) and t.func.id == "isinstance"
                and len(t.args) == 2):
            return False
        types = t.args[1].elts if isinstance(t.args[1], ast.Tuple) else [t.args[1]]
        return (any(view.sem.qualname(x) in _DTENSOR_CLASSES for x in types)
                and dtensor(t.args[0], p))

    from .unconditional import unconditional
    got = None
    for c in view.sem.function_calls(fn):
        f = c.func
        a = entry_of(view, c) if isinstance(f, ast.Attribute) else None
        if a is not None and a.runs and a.receiver in ("dtensor", "any") and a.method == f.attr:
            if dtensor(f.value, c) and unconditional(view, c, fn, holds):
                op = a.runs[0]
                got = Effect(op, c, view.path, what=f"the {op_words(op)} inside `{a.key}()`")
                break
            continue
        if depth >= 3 or not (c.args or c.keywords):
            continue
        target = hub.resolve_call(view, c)
        if target is None or not isinstance(target[1], FUNC_TYPES) or target[1] is fn:
            continue
        sub_d = frozenset(p for p, x in _call_args(c, target[1]) if dtensor(x, c))
        sub_m = frozenset(p for p, x in _call_args(c, target[1]) if isinstance(x, ast.Name) and x.id in mods
                          and reaching(view, x.id, c)[0] == "param")
        if (sub_d or sub_m) and unconditional(view, c, fn, holds):
            e = _gathers(hub, target[0], target[1], sub_m, sub_d, Effect, depth + 1)
            if e is not None:
                got = e.through(target[1].name)
                break
    memo[key] = got
    return got


def _sharded_loops(view, fn, mods) -> dict:
    """name -> the ``for`` statements of ``fn`` that bind it to an entry of the state dict or the
    parameters of a parameter in ``mods`` (``for k, v in model.state_dict().items()``, ``for p in
    model.parameters()``, ``for n, p in model.named_parameters()``)."""
    got = {}
    if not mods:
        return got
    for st in ast.walk(fn):
        if isinstance(st, ast.For) and view.sem.enclosing_function(st) is fn:
            t = _sharded_target(view, st.iter, st.target, mods)
            if t is not None:
                got.setdefault(t, []).append(st)
    return got


def _sharded_target(view, it, target, mods):
    """The name ``target`` (of a ``for`` over ``it``) binds to a value of the state dict or the
    parameters of a parameter in ``mods``, else None."""
    pair = False
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr in ("items", "values") \
            and not it.args:
        pair = it.func.attr == "items"
        it = it.func.value
        if not (isinstance(it, ast.Call) and it.func.__class__ is ast.Attribute and it.func.attr == "state_dict"):
            return None
    elif isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr == "state_dict":
        return None  # ``for k in model.state_dict()``: the keys
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr in _SHARDED_ITERS
            and isinstance(it.func.value, ast.Name) and it.func.value.id in mods
            and reaching(view, it.func.value.id, it)[0] == "param"):
        return None
    if pair or it.func.attr == "named_parameters":
        target = target.elts[1] if isinstance(target, ast.Tuple) and len(target.elts) == 2 else None
    return target.id if isinstance(target, ast.Name) else None
