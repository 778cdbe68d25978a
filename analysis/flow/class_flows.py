"""Where a class, used as a value, gets built: the expression that holds it and what happens to it.

``class_value_use(e)`` reads one use ``e`` of a class (or of a value that holds classes) upward:
through a conditional expression (``A if c else B``), a container display (``{"a": A, "b": B}``,
``[A, B]``), a subclass made at run time (``type("Mixed", (Mixin, A), {})``), and answers

- ``("call", call)``: the value is called, one instance each time the call runs (``A(...)``,
  ``(A if c else B)(...)``, ``MAP[key](...)`` of a display of classes);
- ``("name", assign)``: the value is bound to one plain name (``Gen = A if c else B``,
  ``MAP = {...}``; one name of a tuple assignment, ``n, Gen = 1, pick(kind)``, answers that
  target ``Name``): the name's uses hold it;
- ``("return", fn)``: a function returns it (a factory of classes): its calls hold it;
- None: any other use (passed on, iterated, stored in an attribute...), which the caller judges.

``name_loads(assign)``: the reads of the name such a binding makes, when they can all be listed in
its function (a local name, never declared ``global`` / ``nonlocal`` there, nor read by a nested
function); None otherwise (a module's name is read by word across the project by the caller).
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, parent

_CONTAINERS = (ast.Tuple, ast.List, ast.Set)


def class_value_use(e: ast.AST):
    """What happens to the class value ``e`` (see the module's docstring)."""
    p = parent(e)
    for _ in range(8):
        if p is None:
            return None
        t = p.__class__
        if t is ast.IfExp and e is not p.test:
            e, p = p, parent(p)
            continue
        if t is ast.Dict and any(v is e for v in p.values):
            e, p = p, parent(p)
            continue
        if t in _CONTAINERS and isinstance(p.ctx, ast.Load):
            q = parent(p)
            if (target := _unpacked_to(q, p, e)) is not None:
                return "name", target  # ``n, Gen = 1, pick(kind)``: the name at its position
            if t is ast.Tuple and _dynamic_subclass(q, p):
                e, p = q, parent(q)  # ``type(name, (Mixin, A), {})``: a subclass of ``A``
                continue
            e, p = p, parent(p)
            continue
        break
    t = p.__class__
    if t is ast.Call and p.func is e:
        return "call", p
    if t is ast.Subscript and p.value is e and isinstance(p.ctx, ast.Load):
        q = parent(p)
        if q.__class__ is ast.Call and q.func is p:
            return "call", q  # ``MAP[key](...)``: builds one of the classes it holds
        return None
    if t is ast.Assign and p.value is e and len(p.targets) == 1 and p.targets[0].__class__ is ast.Name:
        return "name", p
    if t is ast.AnnAssign and p.value is e and p.target.__class__ is ast.Name and p.simple:
        return "name", p
    if t is ast.Return and p.value is e:
        fn = parent(p)
        while fn is not None and not isinstance(fn, (*FUNC_TYPES, ast.Lambda, ast.ClassDef)):
            fn = parent(fn)
        if isinstance(fn, FUNC_TYPES):
            return "return", fn
    return None


def _dynamic_subclass(call, bases) -> bool:
    """``call`` is ``type(name, bases, namespace)`` with ``bases`` its base-class tuple."""
    return (call.__class__ is ast.Call and call.func.__class__ is ast.Name and call.func.id == "type"
            and len(call.args) == 3 and call.args[1] is bases and not call.keywords)


def _unpacked_to(q, tup, e):
    """The target ``Name`` that ``e``, an element of the tuple display ``tup``, is bound to by the
    tuple assignment ``q`` (same length, no starred element); else None."""
    if q.__class__ is not ast.Assign or q.value is not tup or len(q.targets) != 1 or tup.__class__ is not ast.Tuple:
        return None
    tgt = q.targets[0]
    if tgt.__class__ not in (ast.Tuple, ast.List) or len(tgt.elts) != len(tup.elts) \
            or any(x.__class__ is ast.Starred for x in (*tgt.elts, *tup.elts)):
        return None
    i = next(i for i, x in enumerate(tup.elts) if x is e)
    return tgt.elts[i] if tgt.elts[i].__class__ is ast.Name else None


def bound_name(assign) -> str:
    if assign.__class__ is ast.Name:
        return assign.id  # one target of a tuple assignment
    return (assign.targets[0] if assign.__class__ is ast.Assign else assign.target).id


def name_loads(assign) -> list | None:
    """The reads of the local name ``assign`` binds, in its function (see the module's docstring),
    or None when ``assign`` is not in a function or the name may be read elsewhere."""
    fn = parent(assign)
    while fn is not None and not isinstance(fn, (*FUNC_TYPES, ast.Module, ast.ClassDef, ast.Lambda)):
        fn = parent(fn)
    if not isinstance(fn, FUNC_TYPES):
        return None
    name = bound_name(assign)
    out = []
    for n in ast.walk(fn):
        if isinstance(n, (ast.Global, ast.Nonlocal)) and name in n.names:
            return None
        if n.__class__ is ast.Name and n.id == name and isinstance(n.ctx, ast.Load):
            f = parent(n)
            while f is not None and f is not fn and not isinstance(f, (*FUNC_TYPES, ast.Lambda, ast.ClassDef)):
                f = parent(f)
            if f is not fn:
                return None  # a nested function reads it: it may run anywhere
            out.append(n)
    return out
