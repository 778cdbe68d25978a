"""Modules that a project function returns after handing them to ``fully_shard`` (FSDP2) or
``parallelize_module``: ``model = build_model(cfg)`` where ``build_model`` shards the module it
builds and returns it (alone, or as an element of a returned tuple). ``hidden.is_fsdp2`` asks this
for a name or a ``self`` attribute bound from a call. (``hidden`` passes in what this module needs of it:
``ops``, its ``(qualnames of the sharding calls, _key, is_fsdp2)``, so the two stay free of an import
circle.) Also the parts of a module a sharding call may be given (``part_root``: a child
``model.mlp``, the element of a loop over ``model.layers``), which ``shard_groups`` reads too."""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, iter_scope_nodes
from .bindings import reaching
from .origins import key_of
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


def tuple_element(v, attr: str):
    """(value, index path) that ``self.<attr>`` takes from its binding ``v`` (an expression, or the
    statement of a tuple assignment): ``self.model, self.opt = model, opt`` gives (``model``, ()),
    ``self.model, self.opt = build(cfg)`` gives (``build(cfg)``, (0,))."""
    value = v if isinstance(v, ast.expr) else getattr(v, "value", None)
    if isinstance(v, ast.Assign) and len(v.targets) == 1 and isinstance(v.targets[0], ast.Tuple):
        elts = v.targets[0].elts
        for i, t in enumerate(elts):
            if isinstance(t, ast.Attribute) and t.attr == attr and isinstance(t.value, ast.Name) \
                    and t.value.id == "self" and not any(isinstance(x, ast.Starred) for x in elts):
                if not isinstance(value, ast.Tuple):
                    return value, (i,)
                ok = len(value.elts) == len(elts) and not any(isinstance(x, ast.Starred) for x in value.elts)
                return (value.elts[i] if ok else None), ()
    return value, ()


# ``for b in <iterable>``: the calls and methods that walk a module list's elements
_WALKS = frozenset({"enumerate", "reversed", "list", "tuple"})
_ELEMENT_METHODS = frozenset({"children", "values", "items"})


def module_chain(expr):
    """(root key, first attribute) of ``root.attr...`` / ``root.attr[i]...`` (root a name or
    ``self.x``); (key, None) for the root itself; None otherwise."""
    k = key_of(expr)
    if k is not None:
        return k, None
    parts = []
    e = expr
    while isinstance(e, (ast.Attribute, ast.Subscript)):
        if isinstance(e, ast.Attribute):
            parts.append(e.attr)
        e = e.value
        k = key_of(e)
        if k is not None and not (k == "self" and isinstance(e, ast.Name)):
            return (k, parts[-1]) if parts else None
    return None


def walked_list(it):
    """The module list a ``for`` walks: ``model.layers``, ``enumerate(model.layers)``,
    ``model.layers.children()``, ``model.blocks.values()``."""
    while True:
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id in _WALKS and it.args:
            it = it.args[0]
        elif isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and \
                it.func.attr in _ELEMENT_METHODS and not it.args:
            it = it.func.value
        else:
            return it


def loop_target_has(target, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(target))


# a loop over these walks a module's descendants (itself among them for ``modules``)
_DESCENDANTS = frozenset({"modules", "named_modules", "named_children"})


def _root_node(expr):
    """The root (a name or ``self.x``) of ``root.attr...`` / ``root.attr[i]...``, or None."""
    got = module_chain(expr)
    if got is None or got[1] is None:
        return None
    e = expr
    while isinstance(e, (ast.Attribute, ast.Subscript)) and key_of(e) != got[0]:
        e = e.value
    return e


def part_root(view, expr, at, depth: int = 0):
    """The module ``expr`` (at ``at``) is a part of: ``model`` of ``model.layers[0]`` /
    ``model.mlp``, or of the element a loop binds walking ``model.layers`` (``enumerate``,
    ``children()``, ``values()``), ``model`` itself or its ``modules()`` / ``named_modules()``;
    ``expr`` itself otherwise. A module whose part holds DTensor parameters has them in its own
    state dict (``hidden.shard_calls``' kind ``dtensor``; ``shard_groups`` reads the same chains)."""
    got = _root_node(expr)
    if got is not None:  # ``block.ffn`` of a loop's ``block``: that loop's module
        return part_root(view, got, at, depth + 1) if isinstance(got, ast.Name) and depth < 2 else got
    if not isinstance(expr, ast.Name):
        return expr
    kind, evs = reaching(view, expr.id, at)
    if kind != "events" or not evs:
        return expr
    roots = []
    for e in evs:
        if not (isinstance(e, (ast.For, ast.AsyncFor)) and loop_target_has(e.target, expr.id)):
            return expr
        it = walked_list(e.iter)
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr in _DESCENDANTS:
            it = it.func.value
        root = it if key_of(it) is not None else _root_node(it)
        if root is None or (roots and key_of(root) != key_of(roots[0])):
            return expr
        roots.append(root)
    return roots[0]
