"""Call-site contexts: a function analysed with what one call passes it.

A function's own analysis sees its parameters as unknown (apart from names that say what they are:
``rank``, ``args``). A *context* binds some parameters to what one call site passes:

- ``binds``: a parameter that receives a rank-varying value (``sync_weights(w, rank)`` binds
  ``owner``; ``train_step(model, opt, batch)`` binds ``batch`` when the batch is this rank's data);
- ``wraps``: a parameter that receives a DDP/FSDP-wrapped module (``train_one_epoch(ddp_model, ...)``):
  its forward and the backward of what it computes are collectives inside the function.

Everything the analysis derives inside the function (values, collective sites, summaries,
divergences, returns) is then computed again under the context, on demand, and cached per context
(by callee and bindings). Contexts nest at most ``MAX_DEPTH`` calls deep: beyond, the plain
(context-free) summaries apply. Only rank-varying values and wrappers are bound: a context can only
make the analysis more definite where a call passes something it can judge, and unknown arguments
stay unknown.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, parent
from .bindings import reaching
from .records import function_name
from .calls import _init_self_copies, _is_ctor, _name_of_any, _wrapped, instance_names, on_fresh_instance
from .calls import call_args, self_offset  # noqa: F401  (the callers' names for them)
from .params import by_name_only, designates_by_default
from .uniformity import _DATA_SRC_NAME
from .values import Value

MAX_DEPTH = 2


class Ctx:
    __slots__ = ("fn", "view", "binds", "wraps", "loaders", "call", "call_path", "depth", "memo", "fname",
                 "self_wraps")

    def __init__(self, view, fn, binds, wraps, call, call_path, depth, loaders=()):
        self.view, self.fn, self.binds, self.wraps = view, fn, binds, wraps
        self.loaders = frozenset(loaders)  # parameters that receive this rank's data source (a loader)
        self.self_wraps: dict = {}  # attributes of ``self`` that hold a wrapped module (methods)
        self.call, self.call_path, self.depth = call, call_path, depth
        self.memo: dict = {}
        name = function_name(fn)
        self.fname = name

    def passed(self, name: str) -> str:
        """"passed to `f` as `x` at line 31"."""
        return f"passed to `{self.fname}` as `{name}` at line {self.call.lineno}"


def memo(view, ctx, name: str) -> dict:
    """The memo table ``name`` of ``view``, or of ``ctx`` under a context."""
    m = ctx.memo if ctx is not None else view.memo
    got = m.get(name)
    if got is None:
        got = m[name] = {}
    return got


def call_context(hub, view, call: ast.Call, target, pctx, want_binds: bool = True, want_wraps: bool = True):
    """The context of ``call`` (in ``view``, itself analysed under ``pctx``) to ``target`` = (callee
    view, callee function), or None when the call binds nothing the plain analysis lacks."""
    depth = (pctx.depth if pctx is not None else 0) + 1
    if depth > MAX_DEPTH:
        return None
    tv, fn = target
    if not isinstance(fn, FUNC_TYPES) or fn is (pctx.fn if pctx is not None else None):
        return None
    pairs = call_args(call, fn)
    self_wraps = _self_wraps(hub, view, call, tv, fn, pctx) if want_wraps else {}
    extra = want_binds and fn.args.kwarg is not None and bool(call.keywords)  # ``**kw`` may receive some
    if not pairs and not self_wraps and not extra:
        return None
    binds, wraps, loaders = {}, {}, []
    wrapped = _wrapped(view, pctx) if want_wraps else ()
    ev = hub.evaluator(view, pctx)
    base_ev = hub.evaluator(tv)
    for name, arg in pairs:
        if wrapped and (_name_of_any(arg) in wrapped or _is_ctor(view.sem, arg)):
            w = hub.wrapper_ctor(view, arg, call, ctx=pctx)
            if w is not None and hub.param_wrapper(tv, fn, name) is None:
                wraps[name] = w
                hub.ctor_views.setdefault(id(w), view)  # a helper's wrapper keeps its module
        if want_binds:
            v = ev.value(arg)
            if v.varying:
                b = base_ev.param_value(fn, name, fn)
                # a parameter rank-varying by its name alone, with a constant default, designates
                # a rank (``def sync(obj, rank=0)``): what this call passes decides
                if not b.varying or (by_name_only(b) and designates_by_default(fn, name)):
                    binds[name] = v
            elif not v.varying and ev.is_loader(arg) is not None and not _DATA_SRC_NAME.search(name):
                loaders.append(name)
    if extra:
        kw = _kwargs_value(ev, call, fn)
        if kw is not None:
            binds[fn.args.kwarg.arg] = kw
    if not binds and not wraps and not loaders and not self_wraps:
        return None
    key = (id(tv), id(fn), depth, tuple(sorted((n, id(v.src)) for n, v in binds.items())),
           tuple(sorted((n, id(w)) for n, w in wraps.items())), tuple(sorted(loaders)),
           tuple(sorted((n, id(w)) for n, w in self_wraps.items())))
    got = hub.contexts.get(key)
    if got is None:
        got = hub.contexts[key] = Ctx(tv, fn, binds, wraps, call, view.path, depth, loaders)
        got.self_wraps = self_wraps
    return got


def _kwargs_value(ev, call: ast.Call, fn):
    """What ``**kw`` of ``fn`` receives from ``call`` when part of it differs between ranks: the
    keywords no named parameter takes (``save(cfg, step=step, val_loss=loss)``), rank-varying under
    their own keys only (``Src.fields``: ``kw["step"]`` stays as uniform as ``step``), or a dict
    passed on whole (``**metrics``), as it is; None when every part is uniform or unknown."""
    a = fn.args
    named = {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)}
    fields, src = set(), None
    for k in call.keywords:
        if k.arg is not None and k.arg in named:
            continue
        v = ev.value(k.value)
        if not v.varying:
            continue
        if k.arg is None:
            return v
        fields.add(k.arg)
        src = src or v.src
    return Value("V", src.built(fields)) if src is not None else None


def _self_wraps(hub, view, call: ast.Call, tv, fn, pctx) -> dict:
    """Attributes of ``self`` that hold a DDP-wrapped module when ``fn`` (a method) runs for this
    call: ``trainer.fit()`` on ``trainer = Trainer(ddp_model)`` (or ``Trainer(ddp_model).fit()``)
    whose ``__init__`` stores the parameter (``self.model = model``), or ``self.step()`` inside a method analysed with them."""
    f = call.func
    cls = parent(fn)
    if not (isinstance(f, ast.Attribute) and isinstance(cls, ast.ClassDef)):
        return {}
    if on_fresh_instance(f, view):
        ctor = f.value  # ``Trainer(ddp_model).fit()``: the instance this call builds
    elif not isinstance(f.value, ast.Name):
        return {}
    elif f.value.id == "self":
        if pctx is not None and pctx.self_wraps and parent(pctx.fn) is cls:
            return pctx.self_wraps
        return {}
    elif f.value.id not in instance_names(view):
        return {}
    else:
        kind, evs = reaching(view, f.value.id, call)
        if kind not in ("events", "global") or len(evs or ()) != 1 or not isinstance(evs[0], ast.Assign):
            return {}
        ctor = evs[0].value
    init = next((st for st in cls.body if isinstance(st, FUNC_TYPES) and st.name == "__init__"), None)
    if init is None or not isinstance(ctor, ast.Call):
        return {}
    wrapped = _wrapped(view, pctx)
    params = {}
    for name, arg in call_args(ctor, init):
        if _name_of_any(arg) in wrapped or _is_ctor(view.sem, arg):
            w = hub.wrapper_ctor(view, arg, ctor, ctx=pctx)
            if w is not None:
                params[name] = w
                hub.ctor_views.setdefault(id(w), view)  # a helper's wrapper keeps its module
    if not params:
        return {}
    out = {}
    for t, v in _init_self_copies(tv, init):
        if v in params:
            out[t] = params[v]
    return out

