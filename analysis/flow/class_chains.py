"""The classes a construction runs: a class and its project base classes (``class_chain``),
the ``__init__`` calls that a construction of it runs with their arguments (``ctor_chain``:
``Trainer(cfg)``, then each ``super().__init__(model, loader)``, as ``origins`` frames), and the
``self.<attr> = value`` bindings of their methods (``self_bindings``; ``runs_first``: ``__init__``
and the methods it calls on ``self``)."""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, iter_scope_nodes
from . import _NOT_PROJECT
from .records import class_named
from .origins import _attr_path


def self_bindings(cls: ast.ClassDef, attr: str) -> list:
    """(method, value, index path) of each ``self.<attr> = value`` of the class's methods (a tuple
    target gives the whole value and the element's path)."""
    out = []
    for m, n in _class_assignments(cls):
        for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
            path = _attr_path(t, attr)
            if path is not None:
                out.append((m, n.value, tuple(path)))
                break
    return out


_assignments: dict[int, tuple] = {}  # id(class) -> (class, ((method, assignment), ...))


def _class_assignments(cls: ast.ClassDef) -> tuple:
    """(method, assignment) of every assignment with a value in the class's methods, read once per
    class (the class node is kept beside its id, so a reused id is never mistaken for it)."""
    got = _assignments.get(id(cls))
    if got is not None and got[0] is cls:
        return got[1]
    out = []
    for m in cls.body:
        if not isinstance(m, FUNC_TYPES):
            continue
        for n in iter_scope_nodes(m):
            if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None:
                out.append((m, n))
    if len(_assignments) > 2048:
        _assignments.clear()
    _assignments[id(cls)] = (cls, tuple(out))
    return _assignments[id(cls)][1]


def runs_first(cls: ast.ClassDef) -> frozenset:
    """``__init__`` and the methods it calls as ``self.m(...)``."""
    init = next((m for m in cls.body if isinstance(m, FUNC_TYPES) and m.name == "__init__"), None)
    names = {"__init__"}
    if init is not None:
        for n in iter_scope_nodes(init):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name) \
                    and n.func.value.id == "self":
                names.add(n.func.attr)
    return frozenset(names)


def ctor_chain(hub, view, cls: ast.ClassDef, ctor=None, ctor_view=None, frames=(), depth: int = 0,
               seen=None) -> list:
    """(view, class, frames) of ``cls`` and the project base classes whose ``__init__`` a
    construction of ``cls`` runs, each with the ``origins`` frames that give the parameters of its
    ``__init__`` their arguments: ``ctor`` (``Trainer(cfg)``, when known) for the first ``__init__``
    found, and, for a base class, the ``super().__init__(model, loader)`` call of its subclass's
    ``__init__`` (in another module too). A class whose ``__init__`` never calls
    ``super().__init__`` runs no base ``__init__`` through it: its bases are not listed."""
    seen = set() if seen is None else seen
    if id(cls) in seen or depth > 5 or len(seen) > 24:
        return []
    seen.add(id(cls))
    init = next((m for m in cls.body if isinstance(m, FUNC_TYPES) and m.name == "__init__"), None)
    if init is not None and ctor is not None:
        frames = (*frames, (init, ctor, ctor_view))
    out = [(view, cls, frames)]
    sup = None
    if init is not None:
        sup = next((n for n in iter_scope_nodes(init) if isinstance(n, ast.Call) and _is_super_init(n)), None)
        if sup is None:
            return out
    for b in cls.bases:
        got = class_named(hub, view, b, _NOT_PROJECT)
        if got is None:
            continue
        if init is None:
            out.extend(ctor_chain(hub, got[0], got[1], ctor, ctor_view, frames, depth + 1, seen))
        else:
            out.extend(ctor_chain(hub, got[0], got[1], sup, view, frames, depth + 1, seen))
        break  # ``super()`` is the first base (the others: not followed)
    return out


def _is_super_init(call: ast.Call) -> bool:
    """``super().__init__(...)`` / ``super(Cls, self).__init__(...)``."""
    f = call.func
    return isinstance(f, ast.Attribute) and f.attr == "__init__" and isinstance(f.value, ast.Call) \
        and isinstance(f.value.func, ast.Name) and f.value.func.id == "super"


def collect_binding(hub, collect, view, val, found, others, depth, path, frames):
    """``collect`` (``wrapped._collect``) of the value of a ``self.<attr>`` binding, read where it is bound: once per
    check for each (binding, depth, path, frames), since every read of the attribute in the class's
    methods, and every instance field of the class, asks for the same bindings again. What it
    found is merged into ``found`` as ``collect`` would have added it (no call twice). Not kept
    while a summary or another view's walk is in progress (its answers may be provisional, and the
    modules it reads are that view's dependencies)."""
    keep = not hub._in_progress and not hub._view_stack
    memo = hub._collected
    key = (view, val, depth, path, frames)
    got = memo.get(key) if keep else None
    if got is None:
        sub, sub_others = [], [False]
        ok = collect(hub, view, val, val, sub, sub_others, depth, path, frames=frames)
        got = (ok, sub, sub_others[0])
        if keep:
            memo[key] = got
    ok, sub, other = got
    if ok is False:
        return False
    for item in sub:
        if not any(c is item[1] for _, c in found):
            found.append(item)
    if other:
        others[0] = True
    return ok


def self_calls(fn, name: str) -> list:
    """The ``self.<name>(...)`` calls of ``fn``'s own scope (where a method it calls runs)."""
    return [n for n in iter_scope_nodes(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr == name and isinstance(n.func.value, ast.Name) and n.func.value.id == "self"]


def chain_attr_values(hub, view, expr) -> list:
    """(view, value) of each ``self.<attr> = value`` of the class whose method reads ``expr``
    (``self.<attr>``) and of its project base classes, in other modules too (``class_chain``):
    ``self.accelerator`` that a trainer base class of another module builds."""
    from .records import class_chain

    if not (isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self"):
        return []
    fn = view.sem.enclosing_function(expr)
    cls = getattr(fn, "_p", None) if fn is not None else None
    if not isinstance(cls, ast.ClassDef):
        return []
    return [(v, val) for v, c in class_chain(hub, view, cls) for _m, val, path in self_bindings(c, expr.attr)
            if not path][:8]
