"""The methods a call on an element of a container of instances may run.

``for cb in self.callbacks: cb.on_fit_start(self)`` (also ``for h in hooks: h(x)``, the
``__call__`` of each, and ``self.callbacks[0].m()``) runs ``m`` of every class whose instances the
container may hold (``instances.element_classes``: displays, ``.append``-built lists, ``self.``
attributes and parameters filled by the project's callers), each found through its method
resolution order (``records.inherited_method``). Unknown (None) when one element is not an
instance of a known project class, or one class's method is not found.

``one_target`` picks the answer of ``resolve_call``, which names one function: the method when
all classes share it, or the one that does something when the others are empty (``pass``, a
docstring, ``...``, a bare ``return``: a base class's default hook contributes no effect to the
union); None when several do something (``resolve_targets`` gives them all).
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES
from .bindings import reaching
from .instances import element_classes, loop_classes
from .records import inherited_method

_MAX_CLASSES = 8


def element_targets(hub, view, call: ast.Call, not_project) -> list | None:
    f = call.func
    if isinstance(f, ast.Name):
        recv, attr = f, "__call__"
    elif isinstance(f, ast.Attribute):
        recv, attr = f.value, f.attr
    else:
        return None
    if isinstance(recv, ast.Name):
        if recv.id == "self":
            return None
        kind, _evs = reaching(view, recv.id, call)
        if kind != "events":
            return None
        classes = loop_classes(hub, view, recv, call, not_project)
    elif isinstance(recv, ast.Subscript) and not isinstance(recv.slice, ast.Slice):
        classes = element_classes(hub, view, recv.value, call, not_project)
    else:
        return None
    if not classes or len(classes) > _MAX_CLASSES:
        return None
    out: list = []
    for cv, cls in classes:
        got = inherited_method(hub, cv, cls, attr, not_project)
        if got is None:
            return None
        if not any(got[1] is o[1] for o in out):
            out.append(got)
    return out


def _empty(fn) -> bool:
    for st in fn.body:
        if isinstance(st, ast.Pass) or isinstance(st, ast.Return) and st.value is None:
            continue
        if isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant):
            continue  # a docstring, ``...``
        return False
    return True


def one_target(targets: list | None):
    if not targets:
        return None
    if len(targets) == 1:
        return targets[0]
    busy = [t for t in targets if not (isinstance(t[1], FUNC_TYPES) and _empty(t[1]))]
    return busy[0] if len(busy) == 1 else None
