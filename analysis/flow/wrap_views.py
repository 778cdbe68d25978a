"""Where a module makes a DDP wrapper, and with what arguments, helpers of the project included.

A wrap is ``DistributedDataParallel(...)`` called in this file, or a call of a project function
(this module or another one) every ``return`` of which gives the wrapper: ``model = wrap(model,
gpu)`` with ``def wrap(m, gpu): return DDP(m.to(gpu), device_ids=[gpu])`` in ``utils.py``. The rules
that read a wrap's arguments (the module, ``device_ids``, ``broadcast_buffers``...) ask ``arg``: a
constructor argument that is a parameter of the helper, never rebound there, reads as the argument
the call passes for it (its default when it passes none), and so do the arguments that the helper
forwards through ``*args`` / ``**kwargs``; the others are read in the helper's module. The finding
of such a wrap is reported at the call of this file.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

from ..semantic import FUNC_TYPES, Semantic, get_arg
from ..torch_api import DDP_CLASS
from .helper_calls import bind_args, is_method


@dataclass(frozen=True, eq=False)
class WrapSite:
    call: ast.Call  # the call of this file: ``DDP(...)`` itself, or the helper's call
    ctor: ast.Call  # the ``DDP(...)`` call, here or in the helper's module
    view: object  # the module view of ``ctor``
    fn: ast.AST | None = None  # the helper the call runs (None for a ``DDP(...)`` of this file)

    @property
    def direct(self) -> bool:
        return self.ctor is self.call

    @property
    def forwarder(self) -> bool:
        """The helper hands the constructor exactly its own ``*args`` and ``**kwargs`` (``def
        wrap(*a, **kw): return DDP(*a, **kw)``): its call reads as the constructor's call."""
        if self.fn is None:
            return False
        params = _params(self.fn)
        var = next((p for p, k in params.items() if k == "vararg"), None)
        kw = next((p for p, k in params.items() if k == "kwarg"), None)
        if len(params) != (var is not None) + (kw is not None) or not params:
            return False
        args, kws = self.ctor.args, self.ctor.keywords
        return all(isinstance(a, ast.Starred) and isinstance(a.value, ast.Name) and a.value.id == var for a in args) \
            and all(k.arg is None and isinstance(k.value, ast.Name) and k.value.id == kw for k in kws) \
            and len(args) <= 1 and len(kws) <= 1 and not any(_rebound(self.view, self.fn, p) for p in params)

    def arg(self, main, pos: int | None, name: str):
        """(expression, its view) of the constructor's argument ``name`` (or positional ``pos``), as
        this call passes it; (None, None) when it is left out, or cannot be read."""
        e = get_arg(self.ctor, pos, name)
        if self.direct:
            return (e, main) if e is not None else (None, None)
        params = _params(self.fn)
        if e is None:
            # forwarded: ``DDP(*args, **kwargs)`` with the helper's own ``*args`` / ``**kwargs``
            return _forwarded(self, main, pos, name, params)
        if isinstance(e, ast.Name) and e.id in params and not _rebound(self.view, self.fn, e.id):
            got = _passed(self.call, self.fn, e.id)
            if got is not None:
                return got, main
            d = _default(self.fn, e.id)
            return (d, self.view) if d is not None else (None, None)
        return e, self.view

    def arg_at(self, main, pos: int | None, name: str):
        """(expression, its view, the node to read it at) of the constructor's argument, as ``arg``
        reads it: at the call of this file when the expression is one of this file, else at the
        constructor in the helper's module; (None, None, None) when it is left out."""
        e, v = self.arg(main, pos, name)
        if e is None:
            return None, None, None
        return e, v, (self.call if v is main else self.ctor)

    def keyword(self, main, name: str):
        """(value, view, node to read it at) of the constructor's keyword ``name``, as the call
        passes it (see ``arg``); (None, None, None) when it is left out."""
        return self.arg_at(main, None, name)


def view_wrap_sites(an, view, helpers: bool = True) -> list[WrapSite]:
    """Every wrap of a module view of the check, in its order (memoised on the view); ``helpers``
    False: only the ``DistributedDataParallel(...)`` calls of the module itself (no module it
    imports spells the constructor: ``wrap_sites``' text prefilter)."""
    key = "wrap_sites" if helpers else "wrap_sites.direct"
    got = view.memo.get(key)
    if got is None:
        got = view.memo[key] = _sites(an, view, helpers)
    return got


def _sites(an, view, helpers: bool) -> list[WrapSite]:
    sem = view.sem
    out = [WrapSite(c, c, view) for c in sem.calls_to(DDP_CLASS)]
    if not helpers:
        return out
    imports, defs = view.imports, view.defs
    for st in (*sem.by_type.get(ast.Assign, ()), *sem.by_type.get(ast.AnnAssign, ()),
               *sem.by_type.get(ast.Return, ())):
        v = st.value
        for c in (v.elts if isinstance(v, (ast.Tuple, ast.List)) else (v,)):
            if not isinstance(c, ast.Call):
                continue
            f = c.func
            base = f.id if isinstance(f, ast.Name) else (
                f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else None)
            if base is None or (base not in defs and base not in imports) or \
                    (sem.call_qualname(c) or "").startswith("torch."):
                continue
            t = an.resolve_call(view, c)
            if t is None or not isinstance(t[1], FUNC_TYPES) or t[1].name == "__init__":
                continue
            ctor = an.wrapper_ctor(view, c, c)
            if ctor is None:
                continue
            cview = an.ctor_views.get(id(ctor), t[0])
            if (cview.sem.call_qualname(ctor) or "") != DDP_CLASS:
                continue
            # the helper whose parameters the constructor reads: the function the call runs, when the
            # constructor is in it (a deeper helper's are read in its own module)
            fn = t[1] if Semantic.enclosing_function(ctor) is t[1] else None
            out.append(WrapSite(c, ctor, cview, fn))
    out.sort(key=lambda s: (s.call.lineno, s.call.col_offset))
    return out


def _params(fn) -> dict:
    """Parameter name -> kind ("pos", "kwonly", "vararg", "kwarg") of ``fn`` (a method's ``self``
    left out); empty for None."""
    if fn is None:
        return {}
    a = fn.args
    pos = [x.arg for x in (*a.posonlyargs, *a.args)]
    out = {p: "pos" for p in (pos[1:] if is_method(fn) else pos)}
    out.update({x.arg: "kwonly" for x in a.kwonlyargs})
    if a.vararg is not None:
        out[a.vararg.arg] = "vararg"
    if a.kwarg is not None:
        out[a.kwarg.arg] = "kwarg"
    return out


def _rebound(view, fn, name: str) -> bool:
    return bool(view.sem.assignments(fn).get(name))


def _passed(call: ast.Call, fn, param: str):
    """The argument ``call`` passes for ``param`` of ``fn``, or None (left out, or behind a
    ``*``/``**`` of the call)."""
    return bind_args(call, fn).get(param)


def _default(fn, param: str):
    a = fn.args
    pos = [*a.posonlyargs, *a.args]
    for x, d in zip(pos[len(pos) - len(a.defaults):], a.defaults):
        if x.arg == param:
            return None if isinstance(d, ast.Constant) and d.value is None else d
    for x, d in zip(a.kwonlyargs, a.kw_defaults):
        if x.arg == param and d is not None:
            return None if isinstance(d, ast.Constant) and d.value is None else d
    return None


def _forwarded(site: WrapSite, main, pos, name, params):
    """The argument the helper forwards through ``*args`` / ``**kwargs`` to the constructor."""
    fn, ctor, call = site.fn, site.ctor, site.call
    if fn is None:
        return None, None
    kw_param = next((p for p, k in params.items() if k == "kwarg"), None)
    if kw_param is not None and any(k.arg is None and isinstance(k.value, ast.Name) and k.value.id == kw_param
                                    for k in ctor.keywords) and not _rebound(site.view, fn, kw_param):
        named = {p for p, k in params.items() if k in ("pos", "kwonly")}
        if name not in named:
            got = next((k.value for k in call.keywords if k.arg == name), None)
            if got is not None:
                return got, main
    var_param = next((p for p, k in params.items() if k == "vararg"), None)
    if pos is not None and var_param is not None and not _rebound(site.view, fn, var_param):
        # ``DDP(a, b, *args)``: the constructor's positional ``pos`` is the call's positional after
        # the helper's own positional parameters
        lead = 0
        for a in ctor.args:
            if isinstance(a, ast.Starred):
                if isinstance(a.value, ast.Name) and a.value.id == var_param:
                    npos = sum(1 for k in params.values() if k == "pos")
                    i = npos + (pos - lead)
                    if pos >= lead and i < len(call.args) and not any(
                            isinstance(x, ast.Starred) for x in call.args[:i + 1]):
                        return call.args[i], main
                break
            lead += 1
    return None, None


class Origin(tuple):
    """A ``(view, DDP(...) call)`` origin reached through a project helper's call: ``via`` is
    ``(view, the helper's call)``, where the wrapper is bound in the code that asked. Unpacks as
    the pair; ``bound_at`` gives the place to judge the wrap's tests and branches at."""

    def __new__(cls, view, ctor, via):
        o = super().__new__(cls, (view, ctor))
        o.via = via
        return o


def bound_at(origin) -> tuple:
    """(view, call) where an origin of ``wrap_origins`` binds the wrapper in the asking code: the
    helper's call for a wrap made by a project helper, else the constructor itself."""
    return getattr(origin, "via", origin)


def as_ctor(hub, origin) -> tuple:
    """(view, call) to read a ``wrap_origins`` origin's constructor arguments at: the helper's call
    when a project helper that forwards all it is given made the wrap (``WrapSite.forwarder``),
    else the constructor itself."""
    via = getattr(origin, "via", None)
    if via is not None:
        site = next((w for w in view_wrap_sites(hub, via[0]) if w.call is via[1]), None)
        if site is not None and site.forwarder:
            return via
    return origin[0], origin[1]


def leaf_arg(hub, view, expr, at, leaf, pos: int | None, name: str) -> tuple:
    """(view, argument, the call it is read at) of the constructor ``leaf`` (an origin of ``expr``
    at ``at``) for ``name`` / positional ``pos``: at the constructor, or, when it forwards a
    helper's ``*args`` / ``**kwargs``, at the forwarding helper's call (``as_ctor``)."""
    lv, ctor = leaf[0], leaf[1]
    a = get_arg(ctor, pos, name)
    if a is not None or not (any(isinstance(x, ast.Starred) for x in ctor.args)
                             or any(k.arg is None for k in ctor.keywords)):
        return lv, a, ctor
    got = with_calls(hub, view, expr, at, [leaf])
    if not got:
        return lv, None, ctor
    v, c = as_ctor(hub, got[0])
    return v, get_arg(c, pos, name), c


def with_calls(hub, view, expr, at, found) -> list:
    """``found`` with each constructor of another module that ``expr`` reaches through a project
    helper's return given the helper's call (``Origin.via``): the origins read again in context,
    whose last frame is the call of the function that holds the constructor. A wrap whose call
    sits in a branch no caller takes is dropped (``dead_for_callers``)."""
    from .origins import origins
    from .params import dead_for_callers

    vias: dict = {}
    for o in origins(hub, view, expr, at, frames=()):
        e, fr = o[1], o[-1]
        if fr and id(e) not in vias:
            vias[id(e)] = (fr[-1][2], fr[-1][1])  # the call of the function that holds the constructor
    sites = None
    out = []
    for o in found:
        via = vias.get(id(o[1])) if not isinstance(o, Origin) else None
        if via is None and not isinstance(o, Origin) and o[0] is not view:
            # not read in context (a ``self.<attr>`` bound in another method): the one call of this
            # module that makes a wrap with that constructor, when there is one
            if sites is None:
                sites = view_wrap_sites(hub, view)
            calls = [w.call for w in sites if w.ctor is o[1]]
            via = (view, calls[0]) if len(calls) == 1 else None
        if via is not None:
            if dead_for_callers(via[0], hub, via[1]):
                continue  # ``if distributed: m = wrap(m)`` where every call passes a false flag
            o = Origin(o[0], o[1], via)
        out.append(o)
    return out
