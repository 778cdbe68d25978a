"""Submodules that a model's ``forward`` never runs when the program runs with its default
configuration.

Asked by DDP209 (issue 25) beside ``step_branches``: ``default_skipped(hub, view, cls, ctors,
wcalls, callers)`` lists the parameterised submodules of ``cls`` (``step_branches.guarded_heads``)
whose every use sits under a test that the default configuration decides against on every
training call of the wrapper:

- a ``forward`` argument (``def forward(self, x, with_aux=False)``) that each call of the wrapper
  in ``wcalls`` passes (or leaves at its default) as a value that is false under the default
  configuration (``defaults.default_value``: ``use_aux = args.aux_weight > 0`` with the option's
  default ``0.0``, a dataclass or config-dict default, a literal), through names, tuples and
  helpers;
- ``self.<attr>`` stored once, in ``__init__``, from a constructor argument (or a value) that each
  construction in ``ctors`` gives a false default, no other code storing that attribute;
- a local bound once to such a test, and ``not`` / ``and`` / ``or`` / comparisons of them.

A value that cannot be determined (an environment variable, an option without a default, a
config file), or a wrapper handed to code that is not seen (``escapes``), leaves the head alone.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, iter_scope_nodes, param_defaults, parent
from .bindings import reaching
from .origins import const_key
from .calls import call_args, self_offset
from .defaults import NOT_OPERATOR, UNKNOWN, combine, default_value
from .step_branches import guarded_heads, passed_arg

_MAX = 6
_SAFE_SINKS = frozenset({"print", "len", "isinstance", "hasattr", "getattr", "type", "id", "str", "repr"})


def default_skipped(hub, view, cls: ast.ClassDef, ctors: list, get_wcalls, callers=None) -> list:
    """[(assign statement, attribute, kind, test, runs_when, (view, call))] for each
    parameterised submodule of ``cls`` that no training call runs under the default configuration
    (see the module docstring): it runs only when ``bool(test)`` is ``runs_when``, which the
    call (a wrapper call or a construction) decides against.
    ``ctors``: (view, call) constructions of the instance wrapped; ``get_wcalls()``: the
    (view, call) training calls of the wrapper, [] when some may not be seen (asked only when a
    head sits under a test)."""
    methods = {f.name: f for f in cls.body if isinstance(f, FUNC_TYPES)}
    fwd, init = methods.get("forward"), methods.get("__init__")
    if fwd is None or init is None or not ctors:
        return []
    witness: dict[int, tuple] = {}
    got_calls: list = []

    def skips(fn, test, runs_when):
        if not got_calls:
            got_calls.append(get_wcalls())
        wcalls = got_calls[0]
        if not wcalls:
            return False
        for cv, cc in ctors:
            for wv, wc in wcalls:
                frame = _Frame(hub, view, cls, fwd, init, (cv, cc), (wv, wc), callers)
                v = frame.value(fn, test, 0)
                if v is UNKNOWN or bool(v) is runs_when:
                    return False
        witness[id(test)] = (frame.decided or wcalls[0], runs_when)
        return True

    out = []
    for st, attr, kind, test in guarded_heads(hub, view, cls, skips):
        (wv, wc), runs_when = witness.get(id(test)) or next(iter(witness.values()))
        out.append((st, attr, kind, test, runs_when, (wv, wc)))
    return out


def dropped_outputs(hub, view, cls: ast.ClassDef, get_wcalls, callers=None) -> list:
    """[(assign statement, attribute, kind, key, (view, test), runs_when)] for each parameterised
    submodule of ``cls`` that ``forward`` runs on every call but whose output leaves ``forward``
    only as the entry ``key`` of the dict display every ``return`` gives, an entry that no training
    call of the wrapper (``get_wcalls()``) reads under the default configuration: the result is bound
    to a name used only as ``out["other"]`` and as an argument of project code (a function, or an
    instance's ``__call__`` / ``forward`` with the construction's options bound) that reads
    ``<param>[key]`` only under a test (``test``, in ``view``) the default configuration decides
    against (``bool(test)`` would have to be ``runs_when``). A use not followed (``out.items()``,
    the whole dict handed to code not seen, returned) keeps the head."""
    from .step_branches import REFLECTIVE, created_heads

    methods = {f.name: f for f in cls.body if isinstance(f, FUNC_TYPES)}
    fwd, init = methods.get("forward"), methods.get("__init__")
    if fwd is None or init is None:
        return []
    created = created_heads(hub, view, init)
    rets = [n for n in iter_scope_nodes(fwd) if isinstance(n, ast.Return)]
    if not created or not rets or any(not isinstance(r.value, ast.Dict) or any(
            const_key(k) is None for k in r.value.keys) for r in rets):
        return []
    heads: dict = {}  # attribute -> the one key of the returned dicts whose value uses it
    for name, m in methods.items():
        for n in ast.walk(m):
            if not (isinstance(n, ast.Name) and n.id == "self"):
                continue
            p = parent(n)
            if isinstance(p, (ast.arg, ast.arguments)) or (
                    isinstance(p, ast.Call) and isinstance(p.func, ast.Name) and p.func.id == "super"):
                continue
            if not isinstance(p, ast.Attribute) or p.attr in REFLECTIVE:
                return []  # ``self`` handed over whole, or reached reflectively
            if p.attr not in created or name == "__init__":
                continue
            key = _returned_key(p, rets) if m is fwd else None
            if key is None or heads.get(p.attr, key) != key:
                heads[p.attr] = None  # used elsewhere, or under two keys
            else:
                heads[p.attr] = key
    heads = {a: k for a, k in heads.items() if k is not None}
    if not heads:
        return []
    wcalls = get_wcalls()
    if not wcalls:
        return []
    out = []
    for attr, key in heads.items():
        witness = None
        for wv, wc in wcalls:
            got = _entry_unread(hub, wv, wc, key, callers)
            if got is None:
                break
            witness = witness or got
        else:
            if witness is not None:
                st, kind = created[attr]
                out.append((st, attr, kind, key, witness[0], witness[1]))
    return out


def _returned_key(node, rets):
    """The key of the returned dict display entry whose value holds ``node``, else None."""
    for r in rets:
        for k, v in zip(r.value.keys, r.value.values):
            if v is node or any(x is node for x in ast.walk(v)):
                return const_key(k)
    return None


def _entry_unread(hub, wv, wc, key, callers):
    """((view, test), runs_when) when the result of the wrapper call ``wc`` (bound to a name) is
    read under ``key`` only under tests the default configuration decides against (and at least
    one such read exists); None when it may be read, or a use is not followed."""
    st = parent(wc)
    if not (isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)
            and st.value is wc):
        return None
    name, scope = st.targets[0].id, wv.sem.scope_of(wc)
    if len(wv.sem.assignments(scope).get(name, ())) != 1:
        return None
    witness = []

    def decided(ev, test, runs_when):
        v = ev[1](test)
        if v is UNKNOWN or bool(v) is runs_when:
            return False
        witness.append(((ev[0], test), runs_when))
        return True

    here = (wv, lambda t: default_value(hub, wv, t, t, callers))
    for n in ast.walk(scope):
        if not (isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)):
            continue
        if not _reads_ok(hub, wv, scope, n, key, callers, here, decided):
            return None
    return witness[0] if witness else None


def _reads_ok(hub, view, fn, use, key, callers, ev, decided, depth: int = 0) -> bool:
    """``use`` (a load of the dict) reads ``key`` only under a test ``decided`` accepts: ``use[k]``
    of another literal key, ``use[key]`` under such a test, or an argument of project code whose
    parameter is read so. ``ev``: (view, the value of a test there under the default
    configuration)."""
    p = parent(use)
    if isinstance(p, ast.Subscript) and p.value is use and isinstance(p.ctx, ast.Load):
        k = const_key(p.slice)
        if k is None:
            return False
        if k != key:
            return True
        from .step_branches import local_guard

        return local_guard(view, fn, p, lambda _f, t, rw: decided(ev, t, rw), "") is not None
    if depth > 2 or not isinstance(p, ast.Call) or use is p.func:
        return False
    arg = next((a for a in (*p.args, *(k.value for k in p.keywords)) if a is use), None)
    if arg is None or any(isinstance(a, ast.Starred) for a in p.args) or any(k.arg is None for k in p.keywords):
        return False
    targets = _consumers(hub, view, p, callers)
    if not targets:
        return False
    for tv, tfn, frame in targets:
        pname = next((pn for pn, a in call_args(p, tfn) if a is use), None)
        if pname is None or tv.sem.assignments(tfn).get(pname):
            return False  # not bound to a named parameter, or the parameter is rebound
        tev = (tv, lambda t, fr=frame, f=tfn: fr.value(f, t, 0))
        for n in ast.walk(tfn):
            if isinstance(n, ast.Name) and n.id == pname and isinstance(n.ctx, ast.Load) \
                    and not _reads_ok(hub, tv, tfn, n, key, callers, tev, decided, depth + 1):
                return False
    return True


def _consumers(hub, view, call, callers):
    """(view, function, frame) for what ``call`` runs: a project function or method, or the
    ``__call__`` (an ``nn.Module``'s ``forward``) of the project class every construction of the
    called value builds, each frame binding that construction's options; [] when not followed."""
    from .step_branches import wrapped_constructions

    got = hub.resolve_call(view, call)
    if got is not None and isinstance(got[1], FUNC_TYPES) and got[1].name != "__init__":
        tv, tfn = got
        owner = parent(tfn)
        if isinstance(owner, ast.ClassDef) and isinstance(call.func, ast.Attribute):
            # a method (``Loss(cfg).term(out, ...)``, ``self.crit.term(out)``): with the options of
            # the instance's constructions where they are known, else with its arguments alone
            init = next((f for f in owner.body if isinstance(f, FUNC_TYPES) and f.name == "__init__"), None)
            ctors = wrapped_constructions(hub, view, call.func.value, call, callers)
            if ctors and init is not None and all(c is owner for _cv, c, _kv, _kc in ctors):
                return [(tv, tfn, _Frame(hub, tv, owner, tfn, init, (kv, kc), (view, call), callers))
                        for _cv, _c, kv, kc in ctors]
            return [(tv, tfn, _Frame(hub, tv, None, tfn, None, None, (view, call), callers))]
        if isinstance(owner, ast.Module):
            return [(tv, tfn, _Frame(hub, tv, None, tfn, None, None, (view, call), callers))]
    if not isinstance(call.func, (ast.Name, ast.Attribute)):
        return []
    ctors = wrapped_constructions(hub, view, call.func, call, callers)
    out = []
    for cv, ccls, kv, kc in ctors:
        ms = {f.name: f for f in ccls.body if isinstance(f, FUNC_TYPES)}
        bases = [cv.sem.qualname(b) or "" for b in ccls.bases]
        # a plain class's ``__call__``, or an ``nn.Module``'s ``forward`` (no base class between)
        target = ms.get("__call__") if all(isinstance(b, ast.Name) and b.id == "object" for b in ccls.bases) \
            else ms.get("forward") if bases == ["torch.nn.Module"] and "__call__" not in ms else None
        init = ms.get("__init__")
        if target is None or init is None or ccls.keywords:
            return []
        out.append((cv, target, _Frame(hub, cv, ccls, target, init, (kv, kc), (view, call), callers)))
    return out


class _Frame:
    """One construction and one wrapper call: the values ``forward``'s parameters and the
    constructor's options hold there."""

    def __init__(self, hub, view, cls, fwd, init, ctor, wcall, callers):
        self.hub, self.view, self.cls, self.fwd, self.init = hub, view, cls, fwd, init
        self.ctor, self.wcall, self.callers = ctor, wcall, callers
        self.decided = None  # the call (wrapper call or construction) whose values were read

    def value(self, fn, e, depth):
        if depth > _MAX or e is None:
            return UNKNOWN
        if isinstance(e, ast.Constant):
            return default_value(self.hub, self.view, e, e)
        got = combine(e, lambda x: self.value(fn, x, depth + 1))
        if got is not NOT_OPERATOR:
            return got
        if isinstance(e, ast.Name):
            kind, evs = reaching(self.view, e.id, e)
            if kind == "param":
                if evs is self.fwd:
                    return self._forward_arg(e.id)
                return UNKNOWN  # another method's parameter: its call site in forward decides
            if kind == "events" and evs and len(evs) == 1 and isinstance(evs[0], ast.Assign) \
                    and len(evs[0].targets) == 1 and isinstance(evs[0].targets[0], ast.Name):
                return self.value(fn, evs[0].value, depth + 1)
            if kind == "global":
                return default_value(self.hub, self.view, e, e, self.callers)
            return UNKNOWN
        if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
            return self._option(e.attr, depth)
        if isinstance(e, (ast.Attribute, ast.Subscript)) and _on_a_name(e):
            return default_value(self.hub, self.view, e, e, self.callers)
        return UNKNOWN

    def _forward_arg(self, name):
        wv, wc = self.wcall
        names = [a.arg for a in (*self.fwd.args.posonlyargs, *self.fwd.args.args)]
        # a method's call passes no ``self``; a plain function (a loss helper) has none
        idx = names.index(name) - self_offset(self.fwd) if name in names else None
        a = passed_arg(wc, self.fwd, name, idx)
        self.decided = self.wcall
        if a is not None:
            return default_value(self.hub, wv, a, wc, self.callers)
        if any(isinstance(x, ast.Starred) for x in wc.args) or any(k.arg is None for k in wc.keywords):
            return UNKNOWN
        d = param_defaults(self.fwd).get(name)
        return UNKNOWN if d is None else default_value(self.hub, self.view, d, d)

    def _option(self, attr, depth):
        """``self.<attr>``: the one value ``__init__`` stores, with its parameters bound to the
        construction's arguments."""
        if self.cls is None:
            return UNKNOWN  # a plain function's ``self`` is no instance of ours
        stores = _self_stores(self.cls).get(attr, [])
        if len(stores) != 1 or parent(stores[0]) is not self.init or any(
                _stored_outside(v, self.cls if v is self.view else None, attr) for v in {id(v): v for v in (
                    self.view, self.ctor[0], self.wcall[0])}.values()):
            return UNKNOWN
        st = stores[0]
        if not (isinstance(st, ast.Assign) and len(st.targets) == 1):
            return UNKNOWN
        return self._init_value(st.value, depth + 1)

    def _init_value(self, e, depth):
        if depth > _MAX:
            return UNKNOWN
        got = combine(e, lambda x: self._init_value(x, depth + 1))
        if got is not NOT_OPERATOR:
            return got
        if isinstance(e, ast.Name):
            kind, evs = reaching(self.view, e.id, e)
            if kind == "param" and evs is self.init and self.ctor is not None:
                cv, cc = self.ctor
                self.decided = self.decided or self.ctor
                a = next((a for p, a in call_args(cc, self.init) if p == e.id), None)
                if a is not None:
                    return default_value(self.hub, cv, a, cc, self.callers)
                if any(isinstance(x, ast.Starred) for x in cc.args) or any(k.arg is None for k in cc.keywords):
                    return UNKNOWN
                d = param_defaults(self.init).get(e.id)
                return UNKNOWN if d is None else default_value(self.hub, self.view, d, d)
        return default_value(self.hub, self.view, e, e, self.callers)


def _on_a_name(e) -> bool:
    """``e`` is built on a name (``cfg.x``, ``d["k"]``): followed by ``default_value`` as any value;
    an attribute of a call's result or of ``self`` is not."""
    while isinstance(e, (ast.Attribute, ast.Subscript)):
        e = e.value
    return isinstance(e, ast.Name) and e.id != "self"


def _self_stores(cls) -> dict:
    """attribute -> the statements of ``cls``'s methods that store ``self.<attribute>``."""
    out: dict = {}
    for m in cls.body:
        if not isinstance(m, FUNC_TYPES):
            continue
        for n in ast.walk(m):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(
                n, (ast.AugAssign, ast.AnnAssign)) else []
            for t in targets:
                for x in ast.walk(t):
                    if isinstance(x, ast.Attribute) and isinstance(x.value, ast.Name) and x.value.id == "self":
                        out.setdefault(x.attr, []).append(n)
    return out


def _stored_outside(view, cls, attr: str) -> bool:
    """Code of ``view`` outside ``cls`` (None: all of it) stores an attribute ``attr`` on
    something other than its own ``self``, or sets attributes by name (``setattr``)."""
    for n in view.sem.of_types(ast.Attribute, ast.Call):  # (a yes from either decides)
        if cls is not None and cls.lineno <= getattr(n, "lineno", 0) <= cls.end_lineno:
            continue
        if isinstance(n, ast.Attribute) and n.attr == attr and not isinstance(n.ctx, ast.Load) \
                and not (isinstance(n.value, ast.Name) and n.value.id == "self"):
            return True  # (another class's own ``self.<attr>`` is another attribute)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "setattr":
            return True
    return False


def escapes(hub, views, ddp_view, ddp_call, wcalls) -> bool:
    """The wrapper that ``ddp_call`` builds is handed to code whose calls of it are not seen: an
    argument of a call that is neither a module-level function of ``views`` nor a torch or plain
    builtin one (``Trainer(model)`` of a library, ``fit(model)`` of a module not loaded), or
    called in a way ``wrapper_calls`` does not list (``model.forward(x, aux=True)``); or a training
    call's function folds every parameter into a value (``_touches_every_parameter``)."""
    if any(_touches_every_parameter(c) for _v, c in wcalls):
        return True
    names = set()
    for _v, c in wcalls:
        f = c.func
        names.add(f.id if isinstance(f, ast.Name) else f.attr)
    ddp_names = _bound_names(ddp_call)
    names |= ddp_names
    for v in views:
        for c in v.sem.calls:
            f = c.func
            if isinstance(f, ast.Attribute) and f.attr in ("forward", "module", "__call__") \
                    and _key(f.value) in names and _holds(hub, v, f.value, c, ddp_view, ddp_call):
                return True  # ``model.forward(x, aux=True)``: a call ``wrapper_calls`` does not list
            for a in (*c.args, *(k.value for k in c.keywords)):
                if isinstance(a, ast.Starred):
                    a = a.value
                if _key(a) not in names or not _holds(hub, v, a, c, ddp_view, ddp_call):
                    continue
                if _seen_callee(hub, v, c, views):
                    continue
                return True
    return False


def _touches_every_parameter(call) -> bool:
    """The function around ``call`` folds every parameter into a value (``loss + 0 * sum(p.sum()
    for p in model.parameters())``): the common way to give an unused head a gradient."""
    fn = parent(call)
    while fn is not None and not isinstance(fn, (*FUNC_TYPES, ast.Module)):
        fn = parent(fn)
    if fn is None:
        return False
    for n in ast.walk(fn):
        if isinstance(n, (ast.GeneratorExp, ast.ListComp, ast.SetComp)):
            for g in n.generators:
                it = g.iter
                if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) \
                        and it.func.attr in ("parameters", "named_parameters"):
                    return True
    return False


def _key(e):
    """The name a wrapper is called by: ``model`` or ``self.model``."""
    if isinstance(e, ast.Name):
        return e.id
    if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
        return e.attr
    return None


def _holds(hub, view, e, at, ddp_view, ddp_call) -> bool:
    from .wrapped import wrap_origins

    found, _all = wrap_origins(hub, view, e, at)
    return any(fv is ddp_view and fc is ddp_call for fv, fc in found)


def _bound_names(call) -> set:
    st = parent(call)
    while st is not None and not isinstance(st, ast.stmt):
        st = parent(st)
    out = set()
    if isinstance(st, (ast.Assign, ast.AnnAssign)):
        for t in (st.targets if isinstance(st, ast.Assign) else [st.target]):
            for x in ast.walk(t):
                if isinstance(x, ast.Name):
                    out.add(x.id)
                elif isinstance(x, ast.Attribute):
                    out.add(x.attr)
    return out


def _seen_callee(hub, view, call, views) -> bool:
    f = call.func
    if isinstance(f, ast.Name) and f.id in _SAFE_SINKS and view.sem.qualname(f) in (None, f.id):
        return True
    qn = view.sem.call_qualname(call) or ""
    if qn.startswith("torch.") and "DistributedDataParallel" not in qn:
        return True
    got = hub.resolve_call(view, call)
    # a module-level function of a module seen (its calls of the parameter are followed); a
    # method or a class may keep the wrapper and call it from anywhere
    return got is not None and isinstance(parent(got[1]), ast.Module) and any(got[0] is v for v in views)
