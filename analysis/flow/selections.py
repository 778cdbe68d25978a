"""Selections by the rank: the elements of a shared sequence that a test on the rank keeps are
different on each rank (``next(p for p in layout if rank in p)``, ``[p for p in layout if rank in
p]``, ``filter(lambda p: rank in p, layout)``, ``for p in layout: if rank in p: mine = p``), even
when every element, and the sequence, is the same everywhere. A test on this rank's data is not
read here (what it keeps is a shape question, ``shapes.py``). Also the elements a project generator
yields (``yielded``; under the call's context when what it passes decides: ``cycle(loader)``) and
the call that made an iterator a name holds (``iterator_made``: ``it = iter(loader)``, ``next(it)``)."""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, iter_scope_nodes, parent
from .bindings import reaching
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
        base = ev.value(e.value, d)
        if base.varying and base.src.fields is not None and sl.__class__ is ast.Constant:
            # a dict of keywords of which only some differ between ranks (``**kw``, ``context``)
            return Value("V", base.src.built(None)) if sl.value in base.src.fields else X
        v = join((base, ev.value(sl, d)))
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

    def elements(tev):
        ys = [n for n in iter_scope_nodes(fn) if n.__class__ is ast.Yield or n.__class__ is ast.YieldFrom]
        if not ys:
            return False  # a plain function: its return value is the iterable
        v = join(tev.element(y.value, d + 1) if y.__class__ is ast.YieldFrom else tev.value(y.value, d + 1)
                 for y in ys if y.value is not None)
        return Value("V", v.src.step(f"yielded by `{fn.name}()`")) if v.varying else v

    got = summary(ev.cs, tv.memo.setdefault("yielded", {}), id(fn), lambda: elements(ev.hub.evaluator(tv)), X)
    if got is False:
        return None
    if got.kind == "X":  # what this call passes may decide (``cycle(loader)``: this rank's batches)
        ctx = ev.hub.call_context(ev.view, call, target, ev.ctx, want_wraps=False)
        if ctx is not None:
            got = summary(ev.cs, ctx.memo.setdefault("yielded", {}), id(fn),
                          lambda: elements(ev.hub.evaluator(tv, ctx)), X) or X
    return got


def iterator_made(ev, name: ast.AST) -> ast.Call | None:
    """The call that made the iterator the name ``name`` holds, when its one binding that reaches
    there is ``name = iter(x)`` or ``name = gen(x)`` with ``gen`` a generator function of the project
    (``it = cycle(loader)`` then ``next(it)``): its elements are that call's. None otherwise."""
    if name.__class__ is not ast.Name:
        return None
    kind, evs = reaching(ev.view, name.id, name)
    if kind not in ("events", "global") or len(evs) != 1 or evs[0].__class__ is not ast.Assign:
        return None
    st = evs[0]
    c = st.value if len(st.targets) == 1 else None
    tgt = st.targets[0] if c is not None else None
    if tgt.__class__ in (ast.Tuple, ast.List) and c.__class__ in (ast.Tuple, ast.List) and len(c.elts) == len(tgt.elts):
        # ``it, n = iter(loader), len(loader)``: the element of the same place
        c = next((v for t, v in zip(tgt.elts, c.elts) if t.__class__ is ast.Name and t.id == name.id), None)
    elif tgt.__class__ is not ast.Name:
        return None
    if c.__class__ is not ast.Call:
        return None
    if ev.sem.call_qualname(c) is None and isinstance(c.func, ast.Name) and c.func.id == "iter" and len(c.args) == 1:
        return c
    target = ev.hub.resolve_call(ev.view, c)
    if target is not None and isinstance(target[1], FUNC_TYPES) and any(
            n.__class__ in (ast.Yield, ast.YieldFrom) for n in iter_scope_nodes(target[1])):
        return c
    return None


def even_rank_piece(ev, expr, depth: int = 0) -> bool:
    """``expr`` is this rank's piece of an even split: ``t.split(len(t) // n)[rank]``
    (``torch.split(t, t.size(0) // n)``, ``t.shape[0]``), with ``n`` a count that is the same on
    every rank (the world size, the processes of a node): the pieces below index ``n`` all have
    ``len(t) // n`` rows (only a remainder piece after them is shorter), so the length of the
    piece a rank below ``n`` takes is the same on every rank."""
    while isinstance(expr, ast.Name) and depth < 4:
        kind, evs = reaching(ev.view, expr.id, expr)
        if kind != "events" or len(evs) != 1 or not isinstance(evs[0], ast.Assign) or len(evs[0].targets) != 1:
            return False
        expr, depth = evs[0].value, depth + 1
    if isinstance(expr, ast.Call) and depth < 4:
        # a project helper whose every ``return`` gives such a piece (``my_piece(data, rank, W)``)
        target = ev.hub.resolve_call(ev.view, expr)
        if target is None or not isinstance(target[1], FUNC_TYPES):
            return False
        rets = [r.value for r in iter_scope_nodes(target[1]) if isinstance(r, ast.Return)]
        tev = ev.hub.evaluator(target[0])
        return bool(rets) and all(r is not None and even_rank_piece(tev, r, depth + 1) for r in rets)
    # the index: a rank (a name, an attribute, a call), not a constant or arithmetic that may
    # reach the remainder piece
    if not isinstance(expr, ast.Subscript) or not isinstance(expr.slice, (ast.Name, ast.Attribute, ast.Call)):
        return False
    call = expr.value
    if not isinstance(call, ast.Call) or call.keywords:
        return False
    qn = ev.sem.call_qualname(call)
    if qn == "torch.split" and len(call.args) == 2:
        base, size = call.args
    elif qn is None and isinstance(call.func, ast.Attribute) and call.func.attr == "split" and len(call.args) == 1:
        base, size = call.func.value, call.args[0]
    else:
        return False
    if not (isinstance(size, ast.BinOp) and isinstance(size.op, ast.FloorDiv)) or isinstance(size.right, ast.Constant) \
            or ev.value(size.left).varying or ev.value(size.right).varying:
        return False
    n = size.left
    if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "len" and len(n.args) == 1:
        of = n.args[0]
    elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "size" and len(n.args) == 1 \
            and isinstance(n.args[0], ast.Constant) and n.args[0].value == 0:
        of = n.func.value
    elif isinstance(n, ast.Subscript) and isinstance(n.value, ast.Attribute) and n.value.attr == "shape" \
            and isinstance(n.slice, ast.Constant) and n.slice.value == 0:
        of = n.value.value
    else:
        return False
    return ast.dump(of) == ast.dump(base) and isinstance(base, (ast.Name, ast.Attribute))
