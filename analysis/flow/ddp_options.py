"""Does a ``DistributedDataParallel(...)`` call run with ``find_unused_parameters`` off for sure?

``strict_ddp_off(hub, view, call, callers)``: the keyword may be absent, a literal ``False``, or a
value that value flow follows to one (``cfg.get("find_unused_parameters", False)`` of a config dict
that never holds the key, ``**cfg["ddp"]`` of a dict literal whose entry is ``False``), through
names, dict displays and ``dict(...)`` calls, stores into the dict (``cfg["rank"] = r``, also inside
a project function the dict is handed to), parameters filled by their callers in this module or
another (``callers``, as ``origins`` takes it). Anything not followed (an unknown key store,
``args.x``, a call's result) is unknown, never off; ``static_graph`` in any form is never off.
``entry_values`` is the dict-entry query underneath (issue 25, DDP209). ``strict_ddp_on`` asks
the converse: ``find_unused_parameters`` on for sure and ``static_graph`` off for sure (DDP222);
there an attribute (``args.find_unused``, ``cfg.find_unused``) is on when the default
configuration makes it ``True`` (``defaults.default_value``: the run without options).
An Accelerate wrapper (``accelerator.prepare(model)``, ``wrapped.prepares_model``) takes its DDP
options from the ``Accelerator``'s ``kwargs_handlers``: ``strict_ddp_off`` of such a call is the
``Accelerator(...)`` built without them (or the ``DistributedDataParallelKwargs(...)`` among them
whose ``find_unused_parameters`` is off for sure), followed to the construction through names,
``self`` attributes and helpers (``_accelerate_off``).
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, get_arg, parent
from .bindings import reaching, target_path

FUP = "find_unused_parameters"
ABSENT = object()  # a dict without the key
MAX_DEPTH = 6

# -- find_unused_parameters ----------------------------------------------------------------------

def strict_ddp_off(hub, view, call: ast.Call, callers=None):
    """(view, node) that makes ``find_unused_parameters`` off for this DDP call (the literal
    ``False``, the ``.get`` default, or the call itself when the keyword is absent), or None when
    it may be on (``True``, unknown, ``static_graph``, ``*args``). ``call`` may also be an
    Accelerate ``prepare(...)`` call (``_accelerate_off``)."""
    if isinstance(call.func, ast.Attribute) and call.func.attr == "prepare":
        return _accelerate_off(hub, view, call, callers)
    return _strict(hub, view, call, callers, on=False)


DDP_KWARGS = frozenset({"accelerate.utils.DistributedDataParallelKwargs",
                        "accelerate.utils.dataclasses.DistributedDataParallelKwargs",
                        "accelerate.DistributedDataParallelKwargs"})


def _accelerate_off(hub, view, call: ast.Call, callers):
    """(view, node) that leaves ``find_unused_parameters`` off for the DDP wrapper that the
    ``Accelerator`` receiving ``call`` builds: the ``Accelerator(...)`` construction without
    ``kwargs_handlers``, or the ``DistributedDataParallelKwargs(...)`` among its handlers that
    turns it off (absent, ``False``); None when a construction is not seen, takes ``**`` or
    positional arguments, or has a handler that is not followed or may turn it on."""
    from .origins import origins
    from .wrapped import ACCELERATOR, leaves

    decider = None
    got = leaves(hub, view, call.func.value, call)
    if not got:
        return None
    for av, ac in got:
        if not isinstance(ac, ast.Call) or (av.sem.call_qualname(ac) or "") not in ACCELERATOR \
                or ac.args or any(k.arg is None for k in ac.keywords):
            return None
        kh = get_arg(ac, None, "kwargs_handlers")
        if kh is None:
            decider = decider or (av, ac)
            continue
        for hv, hl in origins(hub, av, kh, ac, callers=callers):
            if not isinstance(hl, (ast.List, ast.Tuple)):
                return None
            for elt in hl.elts:
                if isinstance(elt, ast.Starred):
                    return None
                for ev, e in origins(hub, hv, elt, hl, callers=callers):
                    if not isinstance(e, ast.Call):
                        return None
                    qn = ev.sem.call_qualname(e) or ""
                    if qn in DDP_KWARGS:
                        if e.args or any(k.arg is None for k in e.keywords):
                            return None
                        off = _strict(hub, ev, e, callers, on=False)
                        if off is None:
                            return None
                        decider = decider or off
                    elif not qn.startswith("accelerate."):
                        return None  # (another Accelerate handler: scaler, process group, profiler...)
        decider = decider or (av, ac)
    return decider


def strict_ddp_on(hub, view, call: ast.Call, callers=None):
    """(view, node) that makes ``find_unused_parameters`` on for sure for this DDP call (the
    literal ``True``, or a config entry followed to one) while ``static_graph`` is absent or
    ``False`` for sure; None when anything is not followed (``args.x``, ``*args``, a call)."""
    return _strict(hub, view, call, callers, on=True)


def _strict(hub, view, call: ast.Call, callers, on: bool):
    """``strict_ddp_on`` (``on``) or ``strict_ddp_off``: the keyword and the ``**`` entries of
    ``find_unused_parameters`` all ``on`` for sure; ``static_graph`` off for sure (``on``) or in
    no form at all (off)."""
    if any(isinstance(a, ast.Starred) for a in call.args) or len(call.args) > 4:
        return None  # positional find_unused_parameters (6th) or unknown spread
    sg = get_arg(call, None, "static_graph")
    if sg is not None and (not on or _off_value(hub, view, sg, call, callers) is None):
        return None
    decider = None
    explicit = next((k for k in call.keywords if k.arg == FUP), None)
    if explicit is not None:
        decider = _off_value(hub, view, explicit.value, call, callers, on=on)
        if decider is None:
            return None
    for k in call.keywords:
        if k.arg is not None:
            continue
        for key, want in ((FUP, on), ("static_graph", False)):
            vals = entry_values(hub, view, k.value, call, key, callers)
            if vals is None:
                return None
            for v in vals:
                if v is ABSENT:
                    continue
                if key != FUP and not on:
                    return None  # off: a ``static_graph`` entry in any form may turn the search off
                got = _off_value(hub, v[0], v[1], v[1], callers, on=want)
                if got is None:
                    return None
                if key == FUP:
                    decider = decider or got
    return decider if on else decider or (view, call)


def _off_value(hub, view, e, at, callers, depth: int = 0, on: bool = False):
    """(view, node) deciding that ``e`` is ``False``/``None`` for sure (``on``: ``True`` for
    sure), else None."""
    if depth > MAX_DEPTH or e is None:
        return None
    if isinstance(e, ast.Constant):
        if on:
            return (view, e) if e.value is True else None
        return (view, e) if e.value is False or e.value is None else None
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr == "get" and e.args:
        key = e.args[0]
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)) or len(e.args) > 2 or e.keywords:
            return None
        vals = entry_values(hub, view, e.func.value, e, key.value, callers)
        if not vals:
            return None
        got = None
        for v in vals:
            if v is ABSENT:
                d = e.args[1] if len(e.args) > 1 else ast.Constant(value=None)
                r = _off_value(hub, view, d, e, callers, depth + 1, on)
                if r is not None and not hasattr(r[1], "lineno"):
                    r = (view, e)
            else:
                r = _off_value(hub, v[0], v[1], v[1], callers, depth + 1, on)
            if r is None:
                return None
            got = got or r
        return got
    if isinstance(e, (ast.Name, ast.Subscript, ast.Attribute)):
        from .origins import origins

        if isinstance(e, ast.Subscript) and not isinstance(e.slice, ast.Constant):
            return None
        if isinstance(e, ast.Subscript):
            vals = entry_values(hub, view, e.value, at, e.slice.value, callers, depth + 1)
            if not vals or ABSENT in vals:
                return None
            got = None
            for v in vals:
                r = _off_value(hub, v[0], v[1], v[1], callers, depth + 1, on)
                if r is None:
                    return None
                got = got or r
            return got
        if isinstance(e, ast.Attribute):
            # ``args.find_unused`` / ``cfg.find_unused``: on when the default configuration turns
            # it on (``defaults.default_value``: an option's default, a namespace's one store), the
            # run a user gets without options; never off (a user's option may turn it on)
            if not on:
                return None
            from .defaults import default_value

            return (view, e) if default_value(hub, view, e, at, callers) is True else None
        leaves = origins(hub, view, e, at, callers=callers)
        if not leaves:
            return None
        got = None
        for lv, le in leaves:
            r = None if isinstance(le, ast.Name) else _off_value(hub, lv, le, le, callers, depth + 1, on)
            if r is None:
                return None
            got = got or r
        return got
    return None


def entry_values(hub, view, expr, at, key: str, callers=None, depth: int = 0):
    """What the dict ``expr`` holds under ``key`` at ``at``: a list of (view, value expression),
    with ``ABSENT`` for a dict that surely lacks it; None when unknown."""
    if depth > MAX_DEPTH:
        return None
    if isinstance(expr, ast.Dict):
        for k, v in zip(reversed(expr.keys), reversed(expr.values)):
            if k is None:
                inner = entry_values(hub, view, v, at, key, callers, depth + 1)
                if inner is None or inner != [ABSENT]:
                    return inner
                continue
            if not isinstance(k, ast.Constant):
                return None
            if k.value == key:
                return [(view, v)]
        return [ABSENT]
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "dict" \
            and view.sem.qualname(expr.func) in (None, "dict"):
        for kw in reversed(expr.keywords):
            if kw.arg == key:
                return [(view, kw.value)]
            if kw.arg is None:
                inner = entry_values(hub, view, kw.value, at, key, callers, depth + 1)
                if inner != [ABSENT]:
                    return inner
        if len(expr.args) > 1:
            return None
        if expr.args:
            return entry_values(hub, view, expr.args[0], at, key, callers, depth + 1)
        return [ABSENT]
    if isinstance(expr, ast.Name):
        return _name_entry(hub, view, expr, at, key, callers, depth)
    if isinstance(expr, ast.Subscript) and isinstance(expr.slice, ast.Constant) and isinstance(expr.slice.value, str):
        outer = entry_values(hub, view, expr.value, at, expr.slice.value, callers, depth + 1)
        if not outer or ABSENT in outer:
            return None
        out = []
        for v in outer:
            got = entry_values(hub, v[0], v[1], v[1], key, callers, depth + 1)
            if got is None:
                return None
            out.extend(got)
        return out
    return None


def _name_entry(hub, view, expr: ast.Name, at, key, callers, depth):
    kind, evs = reaching(view, expr.id, at)
    if kind in ("events", "global"):
        if not evs:
            return None
        out = []
        for e in evs:
            if not isinstance(e, ast.Assign) or len(e.targets) != 1 or target_path(e.targets[0], expr.id) != []:
                return None
            got = entry_values(hub, view, e.value, e, key, callers, depth + 1)
            if got is None:
                return None
            out.extend(got)
        return _after_stores(hub, view, expr.id, at, evs, key, out, depth)
    if kind == "param" and isinstance(evs, FUNC_TYPES):
        got = _param_entry(hub, view, expr, evs, key, callers, depth)
        return None if got is None else _after_stores(hub, view, expr.id, at, [evs], key, got, depth)
    return None


def _after_stores(hub, view, name: str, at, bindings, key, out, depth):
    """``out`` (the entry as bound) updated by the stores into ``name`` between ``bindings`` and
    ``at``: one under ``key`` replaces it, one under another literal key or a project call that
    never stores ``key`` leaves it; anything else makes it unknown (None)."""
    from .mutations import mutations

    for node, _values in mutations(view, name, at, bindings):
        st = _store_key(node, name)
        if st is not _NOT_STORE:
            if st is None:
                return None
            if st == key:
                out = [v for v in out if v is not ABSENT] + [(view, node.value)]
            continue
        if not _harmless_call(hub, view, node, name, key, depth):
            return None
    return out


def _param_entry(hub, view, expr, fn, key, callers, depth):
    """The entry of a parameter: what every call (of this module, else of the project) passes."""
    from .context import call_args

    sites = [(view, c) for c in hub.call_sites(view, fn)[:8]]
    if not sites and callers is not None:
        sites = callers(view, fn)[:8]
    if not sites:
        return None
    out = []
    for cv, c in sites:
        a = next((a for p, a in call_args(c, fn) if p == expr.id), None)
        if a is None:
            return None
        got = entry_values(hub, cv, a, c, key, callers, depth + 1)
        if got is None:
            return None
        out.extend(got)
    return out


_NOT_STORE = object()


def _store_key(node, name: str):
    """The literal key ``node`` (``name[k] = v``) stores under; None for an unknown key;
    ``_NOT_STORE`` when ``node`` is not such a store."""
    if not isinstance(node, ast.Assign):
        return _NOT_STORE
    for t in node.targets:
        if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == name:
            k = t.slice
            return k.value if isinstance(k, ast.Constant) and isinstance(k.value, str) else None
    return None  # a store deeper in (``d["a"]["b"] = v``): unknown


def _harmless_call(hub, view, call, name: str, key: str, depth: int) -> bool:
    """A call handed the dict ``name`` that surely does not store ``key`` in it: a project
    function whose parameter only receives stores under other literal keys and reads."""
    if not isinstance(call, ast.Call) or depth > 3:
        return False
    target = hub.resolve_call(view, call)
    if target is None or not isinstance(target[1], FUNC_TYPES):
        return False
    from .context import call_args

    tv, fn = target
    params = [p for p, a in call_args(call, fn) if isinstance(a, ast.Name) and a.id == name]
    if len(params) != 1:
        return False
    p = params[0]
    for n in ast.walk(fn):
        if isinstance(n, ast.Name) and n.id == p:
            up = parent(n)
            if isinstance(up, ast.Subscript) and up.value is n:
                if isinstance(up.ctx, ast.Load):
                    continue
                k = up.slice
                if isinstance(k, ast.Constant) and isinstance(k.value, str) and k.value != key \
                        and isinstance(parent(up), ast.Assign):
                    continue
                return False
            if isinstance(up, ast.Attribute) and up.value is n and up.attr in ("get", "keys", "items", "values"):
                continue
            if isinstance(n.ctx, ast.Load) and isinstance(up, ast.Compare):
                continue
            if isinstance(up, ast.arguments) or isinstance(up, ast.arg):
                continue
            return False
    return True
