"""Selections by the rank: the elements of a shared sequence that a test on the rank keeps are
different on each rank (``next(p for p in layout if rank in p)``, ``[p for p in layout if rank in
p]``, ``filter(lambda p: rank in p, layout)``, ``for p in layout: if rank in p: mine = p``), even
when every element, and the sequence, is the same everywhere. A test on this rank's data is not
read here (what it keeps is a shape question, ``shapes.py``). Also the elements a project generator
yields (``yielded``)."""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, iter_scope_nodes, parent
from .values import RANK, Value, X, join, summary

_SCOPES = (*FUNC_TYPES, ast.Lambda, ast.ClassDef, ast.Module)


def comprehension_value(ev, comp: ast.AST, d: int) -> Value:
    """A list / set comprehension or a generator: its elements' variance (the names it binds are
    elements of its iterables), else rank-varying when an ``if`` test reads the rank (it keeps
    different elements on each rank), else unknown."""
    v = ev.value(comp.elt, d)
    if v.varying:
        return v
    for g in comp.generators:
        for test in g.ifs:
            v = ev.value(test, d)
            if v.varying and v.src.cat == RANK:
                return Value("V", v.src.step(f"which selects the elements at line {comp.lineno}"))
    return X


def filtered(ev, call: ast.Call, d: int) -> Value:
    """``filter(lambda p: <test>, seq)``: the sequence's own variance, else the test's on the rank."""
    v = ev.value(call.args[1], d)
    if v.varying:
        return v
    t = ev.value(call.args[0].body, d)
    if t.varying and t.src.cat == RANK:
        return Value("V", t.src.step(f"which selects the elements at line {call.lineno}"))
    return X


def picks_element(test_stmt: ast.AST, ev: ast.stmt) -> bool:
    """``for p in layout: if rank in p: mine = p``: an assignment under an ``if`` whose test reads
    the variable of an enclosing ``for`` (of the same scope), of a value that reads it too, keeps
    the element the test picks (a value set under a test of the rank alone, ``if rank == 0: x =
    5``, is left to the broadcast that may follow it, unseen)."""
    if not isinstance(test_stmt, ast.If) or not isinstance(ev, (ast.Assign, ast.AnnAssign)) or ev.value is None:
        return False
    value_names = {n.id for n in ast.walk(ev.value) if isinstance(n, ast.Name)}
    test_names = {n.id for n in ast.walk(test_stmt.test) if isinstance(n, ast.Name)}
    p = parent(test_stmt)
    while p is not None and not isinstance(p, _SCOPES):
        if isinstance(p, (ast.For, ast.AsyncFor)):
            bound = {n.id for n in ast.walk(p.target) if isinstance(n, ast.Name)}
            if bound & test_names and bound & value_names:
                return True
        p = parent(p)
    return False


def subscript_value(ev, e: ast.Subscript, d: int):
    """Uniformity of ``e`` (a subscript) for the evaluator ``ev``: with a constant index into a
    call, a tuple or a list (``get_sizes()[2]``), the element at that place (``ev._unpack``, as
    ``_, _, world = get_sizes()`` would bind it), not the whole tuple; else the join of the
    container and the index."""
    sl = e.slice
    if sl.__class__ is ast.Constant and sl.value.__class__ is int and sl.value >= 0 \
            and e.value.__class__ in (ast.Call, ast.Tuple, ast.List):
        return ev._unpack(e.value, [sl.value], d)
    v = None
    if sl.__class__ is ast.Constant and sl.value.__class__ is str:
        from .dict_fields import field  # lazy: dict_fields follows bindings and helpers' returns
        v = field(ev, e, d)
    if v is None:
        v = join((ev.value(e.value, d), ev.value(sl, d)))
    if v.varying:
        from .saved_fields import saved_field  # a field of a file the module writes: what the writers stored
        got = saved_field(ev, e, d)
        if got is not None:
            return got
    return v


def yielded(ev, call: ast.Call, d: int) -> Value | None:
    """The elements of a generator function of the project that ``call`` starts: the join of what
    its ``yield``s give (``yield from it`` gives the elements of ``it``), as the function runs with
    unknown parameters; None when ``call`` starts no generator of the project. Generators that
    yield from each other: the one met again reads as unknown, and what that made is not memoised
    for good (``values.summary``), whichever was asked first."""
    target = ev.hub.resolve_call(ev.view, call)
    if target is None or not isinstance(target[1], FUNC_TYPES):
        return None
    tv, fn = target

    def elements():
        ys = [n for n in iter_scope_nodes(fn) if n.__class__ is ast.Yield or n.__class__ is ast.YieldFrom]
        if not ys:
            return False  # a plain function: its return value is the iterable
        tev = ev.hub.evaluator(tv)
        v = join(tev.element(y.value, d + 1) if y.__class__ is ast.YieldFrom else tev.value(y.value, d + 1)
                 for y in ys if y.value is not None)
        return Value("V", v.src.step(f"yielded by `{fn.name}()`")) if v.varying else v

    got = summary(ev.cs, tv.memo.setdefault("yielded", {}), id(fn), elements, X)
    return got if got is not False else None
