"""Parameter sinks: which parameters of a function reach the argument of a collective.

``param_sinks(hub, view, fn, table)`` answers, for a function of this project (this file or
another one), which of its parameters it passes *as they are* to a collective of ``table``
(``{op: (position, keyword)}``): ``reduce_mean(value)`` whose body runs ``dist.all_reduce(value)``.
It follows helpers of helpers (``log(x)`` -> ``reduce_mean(x)``), across files, to a small depth.
A parameter the function tests or converts (``isinstance(value, torch.Tensor)``,
``torch.as_tensor(value)``) or rebinds before the collective is not a sink: unknown never
produces a finding.

``bind_args(call, fn)`` maps a call's arguments to the callee's parameter names (``self``
skipped for methods and constructors).
"""
from __future__ import annotations

import ast

from ..torch_api import D
from ..semantic import FUNC_TYPES, get_arg, param_names, parent
from .bindings import reaching
from .summaries import Effect, on_subgroup, scope_calls

_CHECKS = frozenset({"isinstance", "is_tensor", "as_tensor", "tensor", "from_numpy", "Tensor", "FloatTensor",
                     "LongTensor", "hasattr", "type", "torch.is_tensor", "to_tensor", "scalar_tensor"})
_MAX_DEPTH = 4


class Sink:
    """``param`` reaches ``effect`` (the collective, with the chain of helpers in ``effect.via``)."""

    __slots__ = ("param", "effect")

    def __init__(self, param: str, effect: Effect):
        self.param, self.effect = param, effect


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


def _checked_params(view, fn) -> frozenset:
    """Parameters ``fn`` tests or converts anywhere (``isinstance(p, ...)``, ``torch.tensor(p)``)."""
    memo = view.memo.setdefault("sinks.checked", {})
    got = memo.get(id(fn))
    if got is None:
        params = set(param_names(fn))
        found = set()
        for c in scope_calls(view, fn):
            f = c.func
            name = f.id if isinstance(f, ast.Name) else (f.attr if isinstance(f, ast.Attribute) else None)
            if name in _CHECKS:
                for a in c.args[:1]:
                    if isinstance(a, ast.Name) and a.id in params:
                        found.add(a.id)
        got = memo[id(fn)] = frozenset(found)
    return got


def _param_of(view, fn, expr) -> str | None:
    """``expr`` is a parameter of ``fn`` that nothing rebinds before it is read there."""
    if not isinstance(expr, ast.Name):
        return None
    kind, got = reaching(view, expr.id, expr)
    if kind == "param" and got is fn:
        return expr.id
    return None


def _guarded(view, fn, node) -> bool:
    """``node`` sits under a ``try`` in ``fn`` (a failure may be expected and handled)."""
    p = parent(node)
    while p is not None and p is not fn:
        if isinstance(p, ast.Try) or p.__class__.__name__ == "TryStar":
            return True
        p = parent(p)
    return False


def param_sinks(hub, view, fn, table: dict, key: str, depth: int = 0) -> tuple[Sink, ...]:
    """The parameters of ``fn`` passed as they are to a collective of ``table``; ``key`` names
    the table in the memo (one memo per rule)."""
    memo = view.memo.setdefault("sinks." + key, {})
    got = memo.get(id(fn))
    if got is not None:
        return got
    if depth > _MAX_DEPTH or not isinstance(fn, FUNC_TYPES):
        return ()
    memo[id(fn)] = ()  # recursion guard
    hub._view_stack.append(view)
    try:
        out = _compute(hub, view, fn, table, key, depth)
    finally:
        hub._view_stack.pop()
    memo[id(fn)] = out
    return out


def _compute(hub, view, fn, table, key, depth):
    sem = view.sem
    checked = _checked_params(view, fn)
    out: list[Sink] = []
    seen = set()
    for c in scope_calls(view, fn):
        if len(out) >= 6:
            break
        if _guarded(view, fn, c):
            continue
        qn = sem.call_qualname(c) or ""
        if qn.startswith(D):
            op = qn[len(D):]
            spec = table.get(op)
            if spec is None or on_subgroup(c, op):
                continue
            p = _param_of(view, fn, get_arg(c, *spec))
            if p is not None and p not in checked and p not in seen:
                seen.add(p)
                out.append(Sink(p, Effect(op, c, view.path)))
            continue
        if qn.startswith(("torch.", "numpy.", "math.")):
            continue
        target = resolved(hub, view, c)
        if target is None or target[1] is fn:
            continue
        inner = param_sinks(hub, target[0], target[1], table, key, depth + 1)
        if not inner:
            continue
        args = bind_args(c, target[1])
        name = getattr(target[1], "name", "?")
        if name == "__init__":
            name = getattr(parent(target[1]), "name", name)
        for s in inner:
            p = _param_of(view, fn, args.get(s.param))
            if p is not None and p not in checked and p not in seen:
                seen.add(p)
                out.append(Sink(p, s.effect.through(name)))
    return tuple(out)


_MISS = object()


def may_import_project(view) -> bool:
    """``view`` imports something that may be a module of the project (a relative import, or a
    top-level name that is not a well-known library)."""
    from .imports import _NOT_PROJECT

    return any(level or mod.split(".")[0] not in _NOT_PROJECT for mod, level, _attr in view.imports.values())


def helper_calls(view, calls, local: bool, hub=None, ops=None):
    """The calls among ``calls`` that may run a project function with a parameter sink: calls of
    imported names (or of attributes of imported modules), and, when ``local`` (this file makes
    the collective itself), calls of this file's functions, classes and ``self.`` methods. With
    ``hub`` and ``ops``, a call of a module-level function of this file whose summary makes none
    of ``ops`` is left out before any resolution."""
    defs, classes, imports = view.defs, view.classes, view.imports
    for c in calls:
        if not (c.args or c.keywords):
            continue
        f = c.func
        if f.__class__ is ast.Name:
            if f.id in imports:
                if _project_import(imports[f.id]):
                    yield c
            elif local and f.id in defs:
                if hub is not None and ops is not None:
                    effs = hub.summary(view, defs[f.id]).collectives
                    if len(effs) < 6 and not any(e.op in ops for e in effs):
                        continue
                yield c
            elif local and f.id in classes:
                yield c
        elif f.__class__ is ast.Attribute and f.value.__class__ is ast.Name:
            b = f.value.id
            if b in imports:
                if _project_import(imports[b]):
                    yield c
            elif local and b == "self":
                if hub is not None and ops is not None:
                    m = _method(view, c, f.attr)
                    if m is None:
                        continue
                    effs = hub.summary(view, m).collectives
                    if len(effs) < 6 and not any(e.op in ops for e in effs):
                        continue
                yield c


def _project_import(imp) -> bool:
    from .imports import _NOT_PROJECT

    mod, level, _attr = imp
    return bool(level) or mod.split(".")[0] not in _NOT_PROJECT


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
    key = (id(view), id(call))
    got = memo.get(key, _MISS)
    if got is _MISS:
        f = call.func
        if f.__class__ is ast.Name:
            ok = f.id in view.defs or f.id in view.classes or f.id in view.imports
        elif f.__class__ is ast.Attribute and f.value.__class__ is ast.Name:
            ok = f.value.id == "self" or f.value.id in view.imports
        else:
            ok = False
        got = memo[key] = hub.resolve_call(view, call) if ok else None
    return got


def callee_name(target) -> str:
    name = getattr(target[1], "name", "?")
    if name == "__init__":
        name = getattr(parent(target[1]), "name", name)
    return name
