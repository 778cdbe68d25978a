"""Where does a program turn ``requires_grad`` off, and on which module's parameters?

A freeze is ``m.requires_grad_(False)`` on a module (or a parameter), ``m.weight.requires_grad =
False``, or the same on the loop variable of ``for p in m.parameters()`` / ``for name, p in
m.named_parameters()`` (also through ``list(...)``, ``enumerate`` is not followed). Its receiver
is the module whose parameters it freezes (``m`` above; ``net.backbone`` for
``net.backbone.requires_grad_(False)``). ``wrapper_of`` then asks whether that module is read out
of a ``DistributedDataParallel`` wrapper (``x.module...``, or a name bound to such a read, also
through a helper's return: ``unwraps.unwrap_sources``) or is the wrapper itself: the expressions
of the wrapper, for the wrapping question (``wrapped.wrap_origins``) to answer.
"""
from __future__ import annotations

import ast

from ..semantic import get_arg, iter_scope_nodes
from .bindings import reaching

_PARAM_ITERS = {"parameters": None, "named_parameters": 1}


def _is_false(e) -> bool:
    return isinstance(e, ast.Constant) and e.value is False


def freeze_sites(scope) -> list:
    """(node, frozen expression) of each freeze among the nodes of ``scope`` (a function or a
    module's top level), in source order: the expression whose ``requires_grad`` is turned off
    (``net.backbone``, ``p``)."""
    out = []
    for n in iter_scope_nodes(scope):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "requires_grad_":
            flag = get_arg(n, 0, "requires_grad")
            if flag is not None and _is_false(flag):
                out.append((n, n.func.value))
        elif isinstance(n, ast.Assign) and _is_false(n.value):
            for t in n.targets:
                if isinstance(t, ast.Attribute) and t.attr == "requires_grad":
                    out.append((n, t.value))
    out.sort(key=lambda x: (x[0].lineno, x[0].col_offset))
    return out


def frozen_module(view, expr, at):
    """(module, loop): the module expression whose parameters the freeze of ``expr`` at ``at``
    turns off, and the loop whose variable ``expr`` is (None for no loop): the iterated module of
    a loop variable over ``m.parameters()`` / ``m.named_parameters()`` (bound only by that loop),
    else ``expr`` itself (``m.head.weight`` stays as written: its root is what matters; a name
    bound otherwise is the module it holds). (None, None) for a loop over anything else."""
    if not isinstance(expr, ast.Name):
        return expr, None
    kind, evs = reaching(view, expr.id, at)
    if kind != "events" or not evs or any(isinstance(b, (ast.For, ast.AsyncFor)) for b in evs) and len(evs) > 1:
        return None, None
    if not isinstance(evs[0], (ast.For, ast.AsyncFor)):
        return expr, None  # ``enc = ddp.module.encoder``: a module bound to a name
    loop = evs[0]
    it = loop.iter
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "list" and len(it.args) == 1:
        it = it.args[0]
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr in _PARAM_ITERS):
        return None, None
    idx = _PARAM_ITERS[it.func.attr]
    t = loop.target
    if idx is None:
        ok = isinstance(t, ast.Name) and t.id == expr.id
    else:
        ok = isinstance(t, ast.Tuple) and len(t.elts) == 2 and isinstance(t.elts[idx], ast.Name) \
            and t.elts[idx].id == expr.id
    return (it.func.value, loop) if ok else (None, None)


def wrapper_of(hub, view, module, at, depth: int = 0) -> list | None:
    """(wrapper expression, the node it is read at, whether ``module`` is a strict submodule of
    the module read out of it) for the module expression ``module`` at ``at``:
    ``w.module.backbone`` -> ``w`` (a submodule); a name every origin of which unwraps (``net =
    unwrap(model)``: ``unwraps.unwrap_sources``, lifted to the caller's argument), or such a
    helper's call itself (``unwrap(model).backbone``) -> those wrappers; a name bound to such a submodule read (``enc = ddp.module.encoder``); else the name or ``self.<attr>`` itself when it is the whole module frozen (``for p
    in model.parameters()``: the module may be the wrapper). None when the root is anything else
    or a read is in another module."""
    from .origins import origins
    from .unwraps import unwrap_sources
    from .wrapped import is_unwrap, unwrapped_base

    e = module
    while isinstance(e, (ast.Attribute, ast.Subscript)) and not (
            isinstance(e.value, ast.Name) and e.value.id == "self"):
        if is_unwrap(e):
            return [(unwrapped_base(e), at, e is not module)]
        e = e.value
    if isinstance(e, ast.Call) and is_unwrap(e):
        return [(unwrapped_base(e), at, e is not module)]
    if not isinstance(e, (ast.Name, ast.Attribute, ast.Call)):
        return None
    srcs = unwrap_sources(hub, view, e, at)  # (a call: a helper that returns ``m.module``)
    if isinstance(e, ast.Call) and not srcs:
        return None
    if srcs:
        if not all(bv is view and isinstance(b, (ast.Name, ast.Attribute)) for _r, bv, b, _a, _f in srcs):
            return None
        return [(b, bat, e is not module) for _r, _bv, b, bat, _f in srcs]
    if isinstance(e, ast.Name) and depth < 2:
        # ``enc = ddp.module.encoder``: a submodule read out of the wrapper, bound to a name
        got = origins(hub, view, e, at)
        if got and all(v is view and isinstance(o, (ast.Attribute, ast.Subscript)) for v, o in got):
            out = []
            for _v, o in got:
                sub = wrapper_of(hub, view, o, o, depth + 1)
                if not sub or not all(below for _w, _a, below in sub):
                    break
                out.extend(sub)
            else:
                return out
    if e is not module:
        return None  # ``w.backbone`` of a wrapper would not resolve: not judged
    return [(e, at, False)]


def selective(node, loop) -> bool:
    """The freeze ``node`` inside the loop ``loop`` over a module's parameters runs under a test
    of its own in the loop's body (``if name.startswith("encoder."): p.requires_grad = False``):
    it freezes some of the parameters only."""
    from ..semantic import parent

    p = parent(node)
    while p is not None and p is not loop:
        if isinstance(p, (ast.If, ast.IfExp)):
            return True
        p = parent(p)
    return False


def callee_freezes(hub, view, call) -> list:
    """(frozen module in the caller's terms, freeze node, its view, selective) of each freeze that
    a function ``call`` may run (``resolve_targets``: a helper, a callback's method) makes on
    what one of its parameters holds (``trainer.raw_model.backbone`` in ``on_fit_start(self,
    trainer)``, through a name bound once to it): the parameter replaced by the argument the call
    passes (``self.raw_model.backbone`` for ``cb.on_fit_start(self)``). Direct freezes only."""
    from .calls import call_args

    out = []
    for cv, fn in hub.resolve_targets(view, call):
        args = dict(call_args(call, fn))
        if not args:
            continue
        for node, expr in freeze_sites(fn):
            module, loop = frozen_module(cv, expr, node)
            e = _through_names(cv, module, node)
            if e is None:
                continue
            path = []
            while isinstance(e, ast.Attribute):
                path.append(e.attr)
                e = e.value
            if not (isinstance(e, ast.Name) and e.id in args):
                continue
            kind, where = reaching(cv, e.id, node)
            if kind != "param" or where is not fn:
                continue
            got = args[e.id]
            for a in reversed(path):
                got = ast.Attribute(value=got, attr=a, ctx=ast.Load())
            out.append((got, node, cv, loop is not None and selective(node, loop)))
    return out


def _through_names(view, e, at, depth: int = 0):
    """``e`` with a name bound once (``trunk = trainer.model.backbone``) read as what it holds."""
    root = e
    while isinstance(root, ast.Attribute):
        root = root.value
    if not isinstance(root, ast.Name) or depth > 3:
        return e
    kind, evs = reaching(view, root.id, at)
    if kind != "events" or len(evs) != 1 or not isinstance(evs[0], ast.Assign) or len(evs[0].targets) != 1 \
            or not isinstance(evs[0].targets[0], ast.Name) or not isinstance(evs[0].value, (ast.Attribute, ast.Name)):
        return e
    if e is root:
        return _through_names(view, evs[0].value, evs[0], depth + 1)
    return e  # ``trunk.head`` of a bound name: not followed
