"""Calls of project functions: which calls may reach one (``helper_calls``, before any
resolution), their resolution memoised per analysis (``resolved``), and how a call's arguments bind
to the callee's parameters (``bind_args``; ``self`` skipped for methods and constructors). Also the
file's calls by the callee's last name (``calls_named``, from ``Semantic.callee_index``) for the
rules that look for ``x.backward()``, ``opt.step()``, ``s.set_epoch()`` or a ``save_*`` helper."""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, iter_scope_nodes, param_names, parent
from .calls import may_resolve
from .records import callee_name, function_name  # noqa: F401  (re-exported)


def is_method(fn: ast.AST) -> bool:
    if not isinstance(parent(fn), ast.ClassDef):
        return False
    for d in getattr(fn, "decorator_list", ()):
        if isinstance(d, ast.Name) and d.id == "staticmethod":
            return False
    return bool(param_names(fn))


def bind_args(call: ast.Call, fn: ast.AST) -> dict[str, ast.expr]:
    """Parameter name -> argument expression of ``call`` for the callee ``fn`` (positional and
    keyword; arguments behind ``*args``/``**kwargs`` are left out)."""
    a = getattr(fn, "args", None)
    if a is None:
        return {}
    pos = [x.arg for x in (*a.posonlyargs, *a.args)]
    if is_method(fn):
        pos = pos[1:]
    out: dict[str, ast.expr] = {}
    for i, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred):
            break
        if i < len(pos):
            out[pos[i]] = arg
    names = set(pos) | {x.arg for x in a.kwonlyargs}
    for k in call.keywords:
        if k.arg and k.arg in names:
            out[k.arg] = k.value
    return out



_MISS = object()


def _merged(a, b):
    """Two disjoint ascending position lists as one."""
    if a and b:
        return sorted(a + b)
    return a or b


def calls_named_or_on_attr(ctx, name: str) -> list[ast.Call]:
    """The calls whose callee's last name is ``name`` and those made on an attribute of that name
    (``x.module(...)`` and ``x.module.forward(...)`` for ``"module"``), in ``ctx.sem.calls`` order,
    each call once."""
    names, attrs, recv, _ = ctx.sem.callee_index()
    a = _merged(names.get(name, ()), attrs.get(name, ()))
    b = recv.get(name, ())
    pos = sorted(set(a) | set(b)) if a and b else (a or b)
    calls = ctx.sem.calls
    return [calls[i] for i in pos]


def calls_named(ctx, name: str) -> list[ast.Call]:
    """The calls whose callee's last name is ``name`` (``f(...)``, ``a.b.f(...)``), in
    ``ctx.sem.calls`` order."""
    names, attrs, _, _ = ctx.sem.callee_index()
    calls = ctx.sem.calls
    return [calls[i] for i in _merged(names.get(name, ()), attrs.get(name, ()))]


def calls_named_if(ctx, keep) -> list[ast.Call]:
    """The calls whose callee's last name passes ``keep(name)`` (asked once per name), in
    ``ctx.sem.calls`` order."""
    names, attrs, _, _ = ctx.sem.callee_index()
    found: list[int] = []
    n = 0
    kept = set()
    for name, pos in names.items():
        if keep(name):
            kept.add(name)
            found += pos
            n += 1
    for name, pos in attrs.items():
        if (name in kept) if name in names else keep(name):
            found += pos
            n += 1
    if n > 1:
        found.sort()
    calls = ctx.sem.calls
    return [calls[i] for i in found]


def may_import_project(view) -> bool:
    """``view`` imports something that may be a module of the project (a relative import, or a
    top-level name that is not a well-known library)."""
    from .imports import _NOT_PROJECT

    return any(level or mod.split(".")[0] not in _NOT_PROJECT for mod, level, _attr in view.imports.values())


def helper_calls(view, calls, local: bool, hub=None, ops=None, ctx=None):
    """The calls among ``calls`` that may run a project function with a parameter sink: calls of
    imported names (or of attributes of imported modules), and, when ``local`` (this file makes
    the collective itself), calls of this file's functions, classes and ``self.`` methods. With
    ``hub`` and ``ops``, a call of a module-level function of this file whose summary makes none
    of ``ops`` is left out before any resolution. With ``ctx`` (``calls`` being its file's calls),
    the check's calls-by-name index narrows the pass."""
    for c, kind, x in _candidates(view, calls, local, ctx):
        if kind is not None and hub is not None and ops is not None:
            if x is None:  # "self", and no method of that name on the class
                continue
            effs = hub.summary(view, x).collectives
            if len(effs) < 6 and not any(e.op in ops for e in effs):
                continue
        yield c


def _candidates(view, calls, local: bool, ctx=None) -> list:
    """``helper_calls`` before the question about ``ops``, as (call, kind, fn): kind "def" for a
    call of this file's function ``fn``, "self" for ``self.m(...)`` with ``fn`` the method ``m`` of
    the enclosing class (None when it has none), None for the others. Memoised: shared by the
    rules that ask (DDP109, DDP111)."""
    key = ("helper_calls", id(calls), local)
    got = view.memo.get(key)
    if got is not None:
        return got
    got = view.memo[key] = []
    add = got.append
    defs, classes, imports = view.defs, view.classes, view.imports
    project = {k for k, imp in imports.items() if _project_import(imp)}  # asked once per import
    if ctx is not None and calls is ctx.sem.calls:
        # only the calls whose callee's name (``f(...)``) or receiver's name (``m.f(...)``) may
        # qualify, from the check's index, in the file's order; each judged as below
        by_name, _, _, by_base = ctx.sem.callee_index()
        names = (project | defs.keys() | classes.keys()) if local else project
        pos = [i for k in names for i in by_name.get(k, ())]
        pos += [i for k in project | {"self"} for i in by_base.get(k, ())]  # disjoint: ``b.f(...)``
        fresh = [o for k in ((project | classes.keys()) if local else project) for i in by_name.get(k, ())
                 if (o := _fresh_instance_call(calls[i])) is not None]
        pos.sort()
        calls = [calls[i] for i in pos]
        if fresh:
            calls = sorted(calls + fresh, key=lambda c: (c.lineno, c.col_offset))
    functions = view.sem.functions
    Name, Attribute = ast.Name, ast.Attribute
    for c in calls:
        if not (c.args or c.keywords):
            continue
        f = c.func
        if f.__class__ is Name:
            if f.id in imports:
                if f.id in project:
                    add((c, None, None))
            elif local and f.id in defs:
                add((c, "def", defs[f.id]))
            elif local and f.id in classes:
                add((c, None, None))
        elif f.__class__ is Attribute and f.value.__class__ is Name:
            b = f.value.id
            if b in imports:
                if b in project:
                    add((c, None, None))
            elif local and b == "self":
                # no function of that name anywhere in the file: no method to find (a layer, ``self.fc1(x)``)
                add((c, "self", _method(view, c, f.attr) if f.attr in functions else None))
        elif f.__class__ is Attribute and f.value.__class__ is ast.Call and f.value.func.__class__ is Name:
            k = f.value.func.id  # ``Cls(...).m(...)``: a method of a class of the file or of the project
            if k in project or (local and k in classes):
                add((c, None, None))
    return got


def _fresh_instance_call(c: ast.Call):
    """The call ``Cls(...).m(...)`` whose receiver is the call ``c``, else None."""
    p = parent(c)
    if p.__class__ is ast.Attribute and p.value is c:
        outer = parent(p)
        if outer.__class__ is ast.Call and outer.func is p:
            return outer
    return None


_NOT_PROJECT_MODS: frozenset | None = None


def _project_import(imp) -> bool:
    global _NOT_PROJECT_MODS
    if _NOT_PROJECT_MODS is None:
        from .imports import _NOT_PROJECT  # lazy: imports.py builds on this module

        _NOT_PROJECT_MODS = _NOT_PROJECT
    mod, level, _attr = imp
    return bool(level) or mod.partition(".")[0] not in _NOT_PROJECT_MODS


def _method(view, call, name):
    """The method ``name`` of the class whose method makes ``call`` (``self.name(...)``)."""
    fn = view.sem.enclosing_function(call)
    cls = parent(fn) if fn is not None else None
    if not isinstance(cls, ast.ClassDef):
        return None
    memo = view.memo.setdefault("sinks.methods", {})
    idx = memo.get(id(cls))
    if idx is None:
        idx = memo[id(cls)] = {st.name: st for st in cls.body if isinstance(st, FUNC_TYPES)}
    return idx.get(name)


def resolved(hub, view, call: ast.Call):
    """``hub.resolve_call`` memoised per call (several rules ask about the same calls)."""
    memo = hub.__dict__.setdefault("_resolved", {})
    key = (view, call)  # the key ``resolve_call`` uses (both hash by identity)
    got = memo.get(key, _MISS)
    if got is _MISS:
        got = memo[key] = hub.resolve_call(view, call) if may_resolve(view, call) else None
    return got



def attr_assignments(ctx, scope: ast.AST) -> dict[str, list[ast.AST]]:
    """``"args.flag"`` -> values assigned to it in ``scope`` (one walk per scope, cached)."""
    cache = ctx.memo("rank_tests.attr_assignments", dict)
    got = cache.get(id(scope))
    if got is None:
        got = {}
        if isinstance(scope, FUNC_TYPES):
            for n in iter_scope_nodes(scope):
                if isinstance(n, ast.Assign):
                    for t in n.targets:
                        if isinstance(t, ast.Attribute):
                            got.setdefault(ctx.text(t), []).append(n.value)
                elif isinstance(n, (ast.AugAssign, ast.AnnAssign)) and isinstance(n.target, ast.Attribute):
                    got.setdefault(ctx.text(n.target), []).extend([n.value, n.value])  # not a single binding
        cache[id(scope)] = got
    return got


def caller_flag_values(ctx, test: ast.Attribute, fn: ast.AST) -> list:
    """(value, caller's scope) of ``args.flag`` in ``fn`` where ``args`` is a parameter (never
    rebound) that every call of ``fn`` in this module fills with a name its caller set that flag
    on once (``args.save_logs = args.logs and is_master(args)`` in ``main``, then
    ``save(args, ...)`` whose body tests ``if args.save_logs:``); [None] when some call does not
    (a call passes something else, or its caller sets the flag more than once or never), [] when
    ``fn`` has no call here."""
    from .calls import call_sites_here

    base = test.value
    if not isinstance(fn, FUNC_TYPES) or not isinstance(base, ast.Name) or base.id not in param_names(fn):
        return []
    if any(isinstance(n, ast.Name) and n.id == base.id and not isinstance(n.ctx, ast.Load)
           for n in iter_scope_nodes(fn)):
        return []
    out = []
    for c in call_sites_here(ctx, fn):
        a = bind_args(c, fn).get(base.id)
        caller = ctx.sem.scope_of(c)
        vals = attr_assignments(ctx, caller).get(f"{a.id}.{test.attr}") if isinstance(a, ast.Name) \
            and caller is not fn else None
        if not vals or len(vals) != 1:
            return [(None, fn)]
        out.append((vals[0], caller))
    return out
