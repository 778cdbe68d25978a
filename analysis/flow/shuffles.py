"""Per-rank shards of a randomly ordered sequence.

A program that partitions a sequence by rank itself (``order[rank::world]``,
``order[rank * per:(rank + 1) * per]``, ``np.array_split(order, world)[rank]``) gives every rank a
disjoint share only when every rank holds the *same* order. ``rank_partition`` recognises such a
partition (its rank-varying bounds are a uniformity question); ``random_order`` says whether the
order of the partitioned sequence comes from a global random generator: an in-place shuffle
(``random.shuffle``, ``numpy.random.shuffle``) of a name whose value reaches it, or a permutation
drawn from one (``random.sample``, ``numpy.random.permutation``, ``torch.randperm`` with no
``generator=``), in its function before the partition or inside the project function (a method,
a generator) whose returned or yielded values it is, followed through the names reaching those
values (``return_deps.output_names``). A sequence a collective made equal (broadcast from one
rank) is not random here. Whether the generator is seeded alike on every rank is
``seeds.project_seeding``'s answer, not this module's.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, get_arg
from .assignments import has_ancestor
from .bindings import EQUALISERS
from .calls import _on_self_attr
from .imports import _NOT_PROJECT
from .origins import statement_of
from .records import method_of
from .return_deps import _root, names_in, output_names
from .values import RANK

# in-place shuffles of their first argument, by the generator they draw from
INPLACE = {"random.shuffle": "random", "numpy.random.shuffle": "numpy"}
# calls that return a random permutation (or ordered sample)
MAKERS = {"random.sample": "random", "numpy.random.permutation": "numpy", "torch.randperm": "torch"}
# calls that keep the order of their first argument
_KEEP = frozenset({"list", "tuple", "numpy.array", "numpy.asarray", "torch.tensor", "torch.as_tensor",
                   "torch.LongTensor", "torch.from_numpy"})
_SPLITS = frozenset({"numpy.array_split", "numpy.split", "torch.chunk", "torch.tensor_split", "torch.split"})
_MAX_DEPTH = 3


def _rank(ev, e) -> bool:
    if e is None:
        return False
    v = ev.value(e)
    return v.varying and v.src is not None and v.src.cat == RANK


def rank_partition(hub, view, sub: ast.Subscript):
    """The sequence ``sub`` takes this rank's share of (``seq[rank::n]``, ``seq[lo:hi]`` with both
    bounds rank-varying, ``split(seq, n)[rank]``), or None."""
    ev = hub.evaluator(view)
    s = sub.slice
    if isinstance(s, ast.Slice):
        if s.lower is None or not (s.step is not None or s.upper is not None):
            return None
        if s.step is not None and _rank(ev, s.step):
            return None
        if _rank(ev, s.lower) and (s.step is not None or _rank(ev, s.upper)):
            return sub.value
        return None
    base = sub.value
    if not isinstance(base, ast.Call) or not _rank(ev, s):
        return None
    qn = view.sem.call_qualname(base) or ""
    if qn in _SPLITS and base.args:
        return base.args[0]
    if isinstance(base.func, ast.Attribute) and base.func.attr in ("chunk", "tensor_split") and qn not in _SPLITS:
        return base.func.value
    return None


def _draws(view, c):
    """The generator family a call draws an order from: an in-place shuffle (its argument), a
    permutation (its result); (family, in place) or None."""
    qn = view.sem.call_qualname(c) or ""
    if qn in INPLACE and c.args:
        return INPLACE[qn], True
    if qn in MAKERS and get_arg(c, None, "generator") is None and not any(k.arg is None for k in c.keywords):
        return MAKERS[qn], False
    return None


def random_order(hub, view, expr, at, depth: int = 0):
    """(family, the call that orders it, its view) when the order of ``expr`` (at ``at``) comes
    from a global random generator; None when it does not or the analysis cannot tell."""
    for _ in range(6):
        if isinstance(expr, ast.Call):
            f = expr.func
            qn = view.sem.call_qualname(expr) or (f.id if isinstance(f, ast.Name) else "")
            if qn in _KEEP and expr.args:
                expr = expr.args[0]
                continue
            if isinstance(f, ast.Attribute) and f.attr in ("tolist", "numpy", "copy") and not expr.args:
                expr = f.value
                continue
        break
    if isinstance(expr, ast.Call):
        d = _draws(view, expr)
        if d is not None and not d[1]:
            return d[0], expr, view
        return _from_call(hub, view, expr, depth)
    if not isinstance(expr, (ast.Name, ast.Attribute, ast.Subscript)):
        return None
    fn = view.sem.enclosing_function(at)
    return _in_scope(hub, view, fn if fn is not None else view.sem.tree, [expr], at, depth)


def _from_call(hub, view, call, depth):
    if depth >= _MAX_DEPTH:
        return None
    target = hub.resolve_call(view, call) or _attr_method(hub, view, call)
    if target is None or not isinstance(target[1], FUNC_TYPES):
        return None
    tv, fn = target
    return _in_scope(hub, tv, fn, None, None, depth + 1)


def _attr_method(hub, view, call):
    """(view, method) for ``self.<attr>.<method>(...)`` where the class binds ``self.<attr>`` once,
    to a parameter holding an instance of one project class (``instances.param_attr_class``)."""
    from .instances import param_attr_class

    f = call.func
    got = param_attr_class(hub, view, f.value) if _on_self_attr(f) else None
    return method_of(hub, *got, f.attr, _NOT_PROJECT) if got is not None else None


def _in_scope(hub, view, scope, seeds, before, depth):
    """A random ordering, in ``scope`` (before the node ``before`` when given), of the names
    reaching ``seeds`` (the scope's returned and yielded values when None)."""
    live = output_names(scope, seeds)
    if not live:
        return None
    sem = view.sem
    fn = scope if isinstance(scope, FUNC_TYPES) else None
    limit = (before.lineno, before.col_offset) if before is not None else None
    found = None
    for c in sem.calls:
        if sem.enclosing_function(c) is not fn or limit is not None and (c.lineno, c.col_offset) >= limit:
            continue
        if fn is None and not has_ancestor(c, scope):
            continue
        qn = sem.call_qualname(c) or ""
        if qn in EQUALISERS and any(names_in(a) & live for a in c.args):
            return None  # made equal on every rank before it is used
        if found is not None:
            continue
        d = _draws(view, c)
        if d is not None and d[1]:
            if set(_root(c.args[0])) & live:
                found = (d[0], c, view)
            continue
        if not _feeds(c, live, seeds is None):
            continue
        if d is not None:
            found = (d[0], c, view)
        elif isinstance(c.func, (ast.Name, ast.Attribute)):
            found = _from_call(hub, view, c, depth)
    return found


def _feeds(c, live, outputs: bool) -> bool:
    """The value of the call ``c`` is stored into a name of ``live`` (or, for ``outputs``, is
    returned or yielded)."""
    st = statement_of(c)
    if isinstance(st, ast.Assign):
        return any(r in live for t in st.targets for r in _root(t))
    if isinstance(st, (ast.AugAssign, ast.AnnAssign)):
        return any(r in live for r in _root(st.target))
    if isinstance(st, (ast.For, ast.AsyncFor)):
        return (c is st.iter or has_ancestor(c, st.iter)) and any(r in live for r in _root(st.target))
    if outputs and isinstance(st, ast.Return):
        return True
    if outputs and isinstance(st, ast.Expr) and isinstance(st.value, (ast.Yield, ast.YieldFrom)):
        return True
    return False
