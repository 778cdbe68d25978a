"""Where does a program apply the *reentrant* activation checkpoint to a module?

A site is ``apply_activation_checkpointing(m, checkpoint_wrapper_fn=f, ...)`` whose ``f`` is
reentrant for sure: ``partial(checkpoint_wrapper, checkpoint_impl=CheckpointImpl.REENTRANT)``, a
``lambda`` or a function of the module that returns ``checkpoint_wrapper(x,
checkpoint_impl=CheckpointImpl.REENTRANT)``, through names (``origins``); or a direct
``checkpoint_wrapper(sub, checkpoint_impl=...REENTRANT)`` of a submodule (``m.blocks[i] =
checkpoint_wrapper(m.blocks[i], ...)``, also on the variable of a loop over ``m.blocks`` /
``m.children()``). Without ``checkpoint_wrapper_fn`` (or ``checkpoint_impl``) the wrapper is
``NO_REENTRANT`` and nothing is a site. A call of a project function that gives its parameter to
such a site (``enable_checkpointing(model)``) is a site too, for the argument it passes.

``module_leaves`` answers which module objects a site's module may be: the origin leaves
(``origins``) of its root (``m`` of ``m.encoder.layers``), a ``DistributedDataParallel(...)`` call
among them when the site checkpoints the wrapper itself.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, get_arg, parent
from ..torch_api import DDP_CLASS
from .calls import reference_call
from .defaults import default_value
from .origins import origins

_MOD = "torch.distributed.algorithms._checkpoint.checkpoint_wrapper."
APPLY_AC = _MOD + "apply_activation_checkpointing"
WRAPPER = _MOD + "checkpoint_wrapper"
REENTRANT = _MOD + "CheckpointImpl.REENTRANT"
_PARTIAL = "functools.partial"
_ITERS = frozenset({"children", "modules", "named_children", "named_modules"})


def reentrant_impl(hub, view, e, at, depth: int = 0):
    """(view, node) proving the ``checkpoint_impl`` value ``e`` is ``CheckpointImpl.REENTRANT``
    on every path, else None."""
    if e is None or depth > 4:
        return None
    if isinstance(e, ast.Attribute):
        return (view, e) if view.sem.qualname(e) == REENTRANT else None
    if not isinstance(e, ast.Name):
        return None
    leaves = origins(hub, view, e, at)
    if not leaves:
        return None
    for lv, le in leaves:
        if not (isinstance(le, ast.Attribute) and lv.sem.qualname(le) == REENTRANT):
            return None
    return leaves[0]


def _wrapper_call_impl(hub, view, call, at):
    """The reentrant proof of a ``checkpoint_wrapper(x, checkpoint_impl=...)`` call, else None."""
    if not (isinstance(call, ast.Call) and view.sem.call_qualname(call) == WRAPPER):
        return None
    return reentrant_impl(hub, view, get_arg(call, 1, "checkpoint_impl"), at)


def reentrant_wrapper_fn(hub, view, e, at, depth: int = 0):
    """(view, node) proving the ``checkpoint_wrapper_fn`` value ``e`` wraps reentrantly on every
    path, else None."""
    if e is None or depth > 4:
        return None
    if isinstance(e, ast.Call) and view.sem.call_qualname(e) == _PARTIAL:
        if not e.args or view.sem.qualname(e.args[0]) != WRAPPER or len(e.args) > 1:
            return None
        kw = next((k.value for k in e.keywords if k.arg == "checkpoint_impl"), None)
        return reentrant_impl(hub, view, kw, e)
    if isinstance(e, ast.Lambda):
        return _wrapper_call_impl(hub, view, e.body, e.body)
    if isinstance(e, ast.Attribute):
        # a method of a project class (``Recompute().wrap``, ``self.wrap``): what it returns
        target = hub.resolve_call(view, _call_of(view, e, at))
        if target is None or not isinstance(target[1], FUNC_TYPES) or target[1].name == "__init__":
            return None
        return _returns_wrapper(hub, *target)
    if isinstance(e, ast.Name):
        fn = view.defs.get(e.id) if hasattr(view, "defs") else None
        if isinstance(fn, FUNC_TYPES):
            return _returns_wrapper(hub, view, fn)
        leaves = origins(hub, view, e, at)
        if not leaves or any(le is e for _lv, le in leaves):
            return None
        got = [reentrant_wrapper_fn(hub, lv, le, le, depth + 1) for lv, le in leaves]
        return got[0] if all(got) else None
    return None


def _returns_wrapper(hub, view, fn):
    """The proof that every ``return`` of ``fn`` is a reentrant ``checkpoint_wrapper(...)``."""
    rets = [n for n in ast.walk(fn) if isinstance(n, ast.Return)]
    got = [_wrapper_call_impl(hub, view, r.value, r) for r in rets]
    return got[0] if got and all(got) else None


def _call_of(view, ref, at) -> ast.Call:
    """A call of the function reference ``ref`` (placed at ``at``), to resolve the reference as
    the call would be: kept in the module's memo, as the analysis memoises by the call's identity."""
    memo = view.memo.setdefault("checkpointing.ref_calls", {})
    got = memo.get(id(ref))
    if got is None or got[0] is not ref:
        got = memo[id(ref)] = (ref, reference_call(ref, at))
    return got[1]


def _loop_module(view, name: ast.Name, at):
    """``m.blocks`` for the variable of ``for b in m.blocks`` / ``enumerate(m.blocks)`` /
    ``m.children()`` that ``name`` is, else None."""
    from .bindings import reaching

    kind, evs = reaching(view, name.id, at)
    if kind != "events" or not evs or not all(isinstance(b, (ast.For, ast.AsyncFor)) for b in evs):
        return None
    loop = evs[0]
    it = loop.iter
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "enumerate" and it.args:
        it = it.args[0]
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr in _ITERS:
        it = it.func.value
    return it if isinstance(it, (ast.Name, ast.Attribute, ast.Subscript)) else None


def module_root(view, e, at):
    """The tracked root of a module expression: ``m`` of ``m.encoder.layers[0]``,
    ``self.model`` of ``self.model.blocks``; the iterated module of a loop variable."""
    if isinstance(e, ast.Name):
        inner = _loop_module(view, e, at)
        if inner is not None:
            e = inner
    while isinstance(e, (ast.Attribute, ast.Subscript)):
        if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
            return e
        e = e.value
    return e if isinstance(e, (ast.Name, ast.Attribute)) else None


def module_leaves(hub, view, e, at) -> list:
    """(view, call) origin leaves of the module expression ``e`` at ``at`` (calls only: a
    constructor, a factory, a ``DDP(...)``)."""
    root = e if isinstance(e, ast.Call) else module_root(view, e, at)
    if root is None:
        return []
    got = [(lv, le) for lv, le in origins(hub, view, root, at) if isinstance(le, ast.Call)]
    if any(lv is not view and lv.sem.call_qualname(le) == DDP_CLASS for lv, le in got):
        from .wrap_views import with_calls

        got = with_calls(hub, view, root, at, got)  # a helper's wrap: its call (``as_ctor``)
    return got


def param_root(view, e, at) -> bool:
    """The module's root is a parameter of the enclosing function that it never rebinds: the
    site is its callers' (``helper_sites``)."""
    from ..semantic import param_names

    root = module_root(view, e, at)
    fn = view.sem.enclosing_function(at)
    return isinstance(root, ast.Name) and isinstance(fn, FUNC_TYPES) and root.id in param_names(fn) \
        and not view.sem.assignments(fn).get(root.id)


def direct_sites(hub, view) -> list:
    """(call, module expression, (view, node) proving reentrancy) of the reentrant checkpoint
    sites written in ``view``."""
    key = "checkpointing.direct_sites"
    got = view.memo.get(key)
    if got is not None:
        return got
    got = view.memo[key] = []
    sem = view.sem
    for c in sem.calls_to(APPLY_AC):
        m = get_arg(c, 0, "model")
        why = reentrant_wrapper_fn(hub, view, get_arg(c, 1, "checkpoint_wrapper_fn"), c)
        if m is not None and why is not None:
            got.append((c, m, why))
    for c in sem.calls_to(WRAPPER):
        up = parent(c)
        if isinstance(up, (ast.Lambda, ast.Return)) or (isinstance(up, ast.Call) and c in up.args):
            continue  # the body of a wrapper function, or an argument of ``partial``
        m = get_arg(c, 0, "module")
        why = _wrapper_call_impl(hub, view, c, c)
        if m is not None and why is not None:
            got.append((c, m, why))
    return got


def helper_sites(hub, view) -> list:
    """(call, argument, proof) of calls in ``view`` of project functions whose parameter one of
    their own direct sites checkpoints (``enable_checkpointing(model)``)."""
    from .context import call_args

    out = []
    for c in view.sem.calls:
        if not c.args and not c.keywords or not isinstance(c.func, (ast.Name, ast.Attribute)):
            continue
        target = hub.resolve_call(view, c)
        if target is None or not isinstance(target[1], FUNC_TYPES):
            continue
        tv, fn = target
        if "checkpoint" not in (tv.text or ""):
            continue
        for sc, m, why in direct_sites(hub, tv):
            if tv.sem.enclosing_function(sc) is not fn:
                continue
            root = module_root(tv, m, sc)
            if not isinstance(root, ast.Name):
                continue
            arg = next((a for p, a in call_args(c, fn) if p == root.id), None)
            if arg is not None and not tv.sem.assignments(fn).get(root.id):
                out.append((c, arg, why))
                break
    return out


# -- ``torch.utils.checkpoint.checkpoint`` in a model's ``forward`` --------------------------------

UTIL_CHECKPOINT = "torch.utils.checkpoint.checkpoint"
_CHAIN = frozenset({"to", "cuda", "cpu", "float", "half", "bfloat16", "double", "train"})


def _ctor(le):
    """``Net(...)`` of ``Net(...).to(device)``."""
    while isinstance(le, ast.Call) and isinstance(le.func, ast.Attribute) and le.func.attr in _CHAIN \
            and isinstance(le.func.value, ast.Call):
        le = le.func.value
    return le


def _every_call_runs(fn, call) -> bool:
    """``call`` runs on every call of ``fn``: under no ``if``/``while``/``try``/conditional
    expression or boolean operator, and after no ``return``/``raise`` of ``fn``."""
    n = parent(call)
    while n is not None and n is not fn:
        if isinstance(n, (ast.If, ast.IfExp, ast.While, ast.Try, ast.BoolOp, ast.comprehension,
                          ast.Lambda, *FUNC_TYPES)):
            return False
        n = parent(n)
    if n is not fn:
        return False
    return not any(isinstance(x, (ast.Return, ast.Raise))
                   and (x.end_lineno, x.end_col_offset) <= (call.lineno, call.col_offset) for x in ast.walk(fn))


def forward_checkpoints(hub, view, le) -> list:
    """(view, call) of the reentrant ``torch.utils.checkpoint.checkpoint`` calls (``use_reentrant``
    left out, the reentrant default, or ``True``) that every ``forward`` of the project class that
    the constructor call ``le`` builds runs (its own ``forward`` or the nearest base class's)."""
    from .records import _NOT_PROJECT, class_chain, class_named

    le = _ctor(le)
    if not isinstance(le, ast.Call):
        return []
    got = class_named(hub, view, le.func, _NOT_PROJECT)
    if got is None:
        return []
    for cv, cls in class_chain(hub, *got):
        fwd = next((n for n in cls.body if isinstance(n, FUNC_TYPES) and n.name == "forward"), None)
        if fwd is not None:
            break
    else:
        return []
    out = []
    for c in cv.sem.scope_calls(fwd):
        if cv.sem.call_qualname(c) != UTIL_CHECKPOINT:
            continue
        flag = get_arg(c, None, "use_reentrant")
        if flag is not None and default_value(hub, cv, flag, c) is not True:
            continue  # ``use_reentrant=False`` or not known to be ``True`` by default
        if _every_call_runs(fwd, c):
            out.append((cv, c))
    return out
