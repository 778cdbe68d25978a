"""Modules that a project function returns after handing them to ``fully_shard`` (FSDP2) or
``parallelize_module``: ``model = build_model(cfg)`` where ``build_model`` shards the module it
builds and returns it (alone, or as an element of a returned tuple). ``hidden.is_fsdp2`` asks this
for a name or a ``self`` attribute bound from a call. (``hidden`` passes in what this module needs of it:
``ops``, its ``(qualnames of the sharding calls, _key, is_fsdp2)``, so the two stay free of an import
circle.)"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, iter_scope_nodes
from .bindings import reaching
from .values import summary


def returns_sharded(hub, view, call, path, kind, ops) -> bool:
    """``call`` runs a project function (this module or another) every ``return`` of which gives
    a module it handed to ``fully_shard`` before (``model = build(cfg); fully_shard(model);
    return model``), or element ``path`` of such returned tuples (``model, opt = setup(cfg)`` of
    ``return model, opt``): what the call binds is that FSDP2 module."""
    if not isinstance(call, ast.Call) or not isinstance(call.func, (ast.Name, ast.Attribute)) or \
            (view.sem.call_qualname(call) or "").startswith("torch."):
        return False
    hub._view_stack.append(view)  # the module read becomes this view's dependency
    try:
        target = hub.resolve_call(view, call)
    finally:
        hub._view_stack.pop()
    if target is None or not isinstance(target[1], FUNC_TYPES) or target[1].name == "__init__":
        return False
    tv, fn = target
    qns, _key, is_fsdp2 = ops

    def compute() -> bool:
        rets = []
        for n in iter_scope_nodes(fn):
            if n.__class__ is ast.Return:
                rets.append(n)
            elif n.__class__ in (ast.Yield, ast.YieldFrom):
                return False
        if not rets or len(rets) > 8:
            return False
        for r in rets:
            v = r.value
            for i in path:
                if not (isinstance(v, ast.Tuple) and isinstance(i, int) and i < len(v.elts)
                        and not any(isinstance(x, ast.Starred) for x in v.elts)):
                    return False
                v = v.elts[i]
            if isinstance(v, ast.Call) and tv.sem.call_qualname(v) in qns:
                continue  # ``return fully_shard(model)``
            if _key(v) is None or not is_fsdp2(hub, tv, v, r, kind=kind):
                return False
        return True

    # a recursion reads as False, and what it made is not memoised for good (``values.summary``)
    return summary(hub.cut_state, tv.memo.setdefault("hidden.returns_sharded", {}), (fn, tuple(path), kind),
                   compute, False)


def returned_modules(hub, view, kind: str, ops) -> bool:
    """The module binds what a project function returns (``model = build(cfg)``) to a module that
    function gave to ``fully_shard`` (``returns_sharded``)."""
    for st in view.sem.by_type.get(ast.Assign, ()):
        v = st.value
        if isinstance(v, ast.Call) and any(
                p is not None and returns_sharded(hub, view, v, p, kind, ops)
                for t in st.targets for p in _target_paths(t, ops[1])):
            return True
    return False


def _target_paths(t, _key):
    """The index path of each name or ``self`` attribute a target binds (``m, (a, b)``)."""
    if isinstance(t, (ast.Tuple, ast.List)):
        for i, e in enumerate(t.elts):
            if isinstance(e, ast.Starred):
                return
            for p in _target_paths(e, _key):
                yield (i, *p)
    elif _key(t) is not None:
        yield ()


def wrapped_on_a_path(view, expr, at) -> bool:
    """A binding of the name ``expr`` that reaches ``at`` wraps it in DDP/FSDP1 (``if fsdp:
    fully_shard(model) else: model = DDP(model)``): it holds either module there."""
    from .calls import WRAPPERS

    if not isinstance(expr, ast.Name):
        return False
    how, evs = reaching(view, expr.id, at)
    return how in ("events", "global") and any(
        isinstance(e, ast.Assign) and isinstance(e.value, ast.Call)
        and (view.sem.call_qualname(e.value) or "") in WRAPPERS for e in evs or ())


def constructs(hub, view, call) -> bool:
    """``call`` builds an instance of a project class (``Trainer(model, mesh)``, whose ``__init__``
    shards its parameter): what it binds is the instance, not the module it sharded."""
    target = hub.resolve_call(view, call)
    return target is not None and isinstance(target[1], FUNC_TYPES) and target[1].name == "__init__"
