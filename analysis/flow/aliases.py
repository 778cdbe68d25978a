"""One tensor object under two names: which two values are the same tensor (the same storage), and
the in-place ``SUM`` reductions that therefore add one storage twice (DDP116).

``same_tensor(hub, a, b)``: ``a`` and ``b`` are ``(view, expression, at)`` uses; the answer is the
node where the second use's way back to the object leaves the first's (the *fork*: the second
name of ``t`` in ``return t, n, t``, the ``a`` of ``b = a``), as ``(view, node)``, or None when
the two are not known to be one object. Each use is followed back step by step, never by a
guess:

- a name through its one reaching binding (``x = e``, tuple unpacking by position); a name bound
  once in a way not followed (a loop target, a parameter) is the object that binding gives;
- a tuple or list display by position, the one ``return`` of a project function (this file or
  another module; a parameter there is the argument of the very call being followed);
- ``t.data``, ``t.detach()``, ``t.view(...)``, ``t.view_as(o)``: the same storage;
- ``dist.all_reduce(t)`` as ``t``'s binding: it writes into ``t`` and leaves the object.

Anything else is the object made there (a call: ``t.clone()``, ``x.sum()``), so two uses are one
object only when both ways end at the same node reached through the same calls. A name with two
reaching bindings (re-assigned on one path) is not followed.

``shared_entry_sums(hub, view, scope)``: the loops of ``scope`` that sum every element of a
container in place (``for v in d.values(): dist.all_reduce(v)``, also ``for v in lst`` and
``for k, v in d.items()``, directly or through a helper that all-reduces its parameter over the
world, ``reductions.sum_reductions``), with two entries of that container that are one tensor: two
stores into the dict under keys that differ (``d[f"a_{k}"] = x``, ``d[f"b_{k}"] = y``), two
appends, or two elements of a display, one after the other in one block, whose values are
``same_tensor``. The container is followed to the dict or list it was made as (``origins``:
through a helper's return, a parameter bound by the module's calls).
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, get_arg, iter_scope_nodes, parent
from ..torch_api import D
from .bindings import reaching, target_path
from .origins import _argument, origins

_SHARE = frozenset({"detach", "view", "view_as"})
_IN_PLACE = frozenset({D + "all_reduce", D + "broadcast"})
_MAX = 16


def _chain(hub, view, e, at) -> list | None:
    """The steps back from the use ``e`` (at ``at``) to the node that made its object, as
    ``(view, node, path, frames)`` (``frames``: the calls whose ``return`` the way went through, as
    ``(fn, call, caller view)``); None where a step is not known."""
    path: tuple = ()
    frames: tuple = ()
    out = []
    for _ in range(_MAX):
        out.append((view, e, path, frames))
        if not path and isinstance(e, ast.Attribute) and e.attr == "data" and isinstance(e.ctx, ast.Load):
            e = e.value
            continue
        if not path and isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr in _SHARE \
                and not view.sem.call_qualname(e):
            e = e.func.value
            continue
        if isinstance(e, (ast.Tuple, ast.List)) and path:
            i = path[0]
            if not isinstance(i, int) or i >= len(e.elts) or any(isinstance(x, ast.Starred) for x in e.elts):
                return None
            e, path = e.elts[i], path[1:]
            continue
        if isinstance(e, ast.Name):
            kind, evs = reaching(view, e.id, at)
            if kind == "param" and frames and frames[-1][0] is evs:
                fn, call, cv = frames[-1]
                a = _argument(call, fn, e.id)
                if a is None:
                    return None
                view, e, at, frames = cv, a, call, frames[:-1]
                continue
            if kind == "param":
                out.append((view, evs, (e.id, *path), frames))
                return out
            if kind != "events" or not evs or len(evs) != 1:
                return None
            ev = evs[0]
            if isinstance(ev, ast.Assign) and len(ev.targets) == 1:
                p = target_path(ev.targets[0], e.id)
                if p is None or any(isinstance(x, ast.Starred) for x in ast.walk(ev.targets[0])):
                    return None
                e, at, path = ev.value, ev, (*p, *path)
                continue
            if isinstance(ev, ast.Call) and (view.sem.call_qualname(ev) or "") in _IN_PLACE \
                    and isinstance(get_arg(ev, 0, "tensor"), ast.Name) and not path:
                e, at = get_arg(ev, 0, "tensor"), ev
                continue
            out.append((view, ev, (e.id, *path), frames))  # a loop target, a ``with`` name: its one binding
            return out
        if isinstance(e, ast.Call):
            target = hub.resolve_call(view, e)
            if target is not None and isinstance(target[1], FUNC_TYPES) and target[1].name != "__init__":
                rets = [n for n in iter_scope_nodes(target[1]) if isinstance(n, ast.Return)]
                if len(rets) == 1 and rets[0].value is not None:
                    frames = (*frames, (target[1], e, view))
                    view, e, at = target[0], rets[0].value, rets[0]
                    continue
                return None
        return out  # the node that made the object (or an entry of what it returns, by ``path``)
    return None


def _key(step) -> tuple:
    _v, node, path, frames = step
    return (id(node), path, tuple(id(f[1]) for f in frames))


def same_tensor(hub, a, b):
    """The fork of the uses ``a`` and ``b`` (see the module's docstring), or None."""
    ca = _chain(hub, *a)
    cb = _chain(hub, *b)
    if not ca or not cb or _key(ca[-1]) != _key(cb[-1]):
        return None
    ka = [_key(s) for s in reversed(ca)]
    rb = list(reversed(cb))
    k = 0
    while k < len(ka) and k < len(rb) and ka[k] == _key(rb[k]):
        k += 1
    if k == len(rb) or k == len(ka):
        return None  # one use lies on the other's way: the same read, not two names
    view, node = rb[k][0], rb[k][1]
    return view, node


# ---------------------------------------------------------------------------------------------
# Loops that sum each element of a container in place


class SharedEntrySum:
    """``loop`` sums in place (``red``: a ``reductions.SumReduce``) each element of a container
    whose entries ``first`` and ``second`` (store statements, appends or display elements, in the
    container's own module ``store_view``) hold one tensor; ``fork`` is ``(view, node)`` where the
    second entry's value becomes a second name of it."""

    __slots__ = ("loop", "red", "first", "second", "store_view", "fork")

    def __init__(self, loop, red, first, second, store_view, fork):
        self.loop, self.red, self.first, self.second = loop, red, first, second
        self.store_view, self.fork = store_view, fork


def _element_loop(red, scope):
    """``(loop, container expression)`` when the reduced name of ``red`` is the element target of
    a ``for`` of ``scope`` over a container (``d.values()``, ``d.items()``'s second target, ``lst``)
    and the reduction runs on every round: no test, ``continue`` or ``break`` of the loop's body
    stands before it."""
    node = red.call
    p = parent(node)
    loop = None
    while p is not None and p is not scope:
        if isinstance(p, ast.For):
            loop = p
            break
        if isinstance(p, (ast.If, ast.While, ast.Try, ast.With, *FUNC_TYPES, ast.Lambda)):
            if not isinstance(p, ast.With):
                return None
        p = parent(p)
    if loop is None or loop.orelse:
        return None
    if any(isinstance(n, (ast.Continue, ast.Break)) for n in ast.walk(loop)):
        return None
    it, tgt = loop.iter, loop.target
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and not it.args and not it.keywords:
        if it.func.attr == "values" and isinstance(tgt, ast.Name) and tgt.id == red.name:
            return loop, it.func.value
        if it.func.attr == "items" and isinstance(tgt, ast.Tuple) and len(tgt.elts) == 2 \
                and isinstance(tgt.elts[1], ast.Name) and tgt.elts[1].id == red.name:
            return loop, it.func.value
        return None
    if isinstance(it, (ast.Name, ast.Attribute)) and isinstance(tgt, ast.Name) and tgt.id == red.name:
        return loop, it
    return None


def _containers(hub, view, expr, at) -> list:
    """``(view, display)``: the dict or list displays (``{}``, ``[]``, ``dict()``) bound to a name
    that ``expr`` may be (``origins``)."""
    out = []
    for v, e, *_ in origins(hub, view, expr, at):
        if isinstance(e, (ast.Dict, ast.List)) or (isinstance(e, ast.Call) and isinstance(e.func, ast.Name)
                                                  and e.func.id in ("dict", "list") and not e.args
                                                  and not e.keywords and v.sem.qualname(e.func) in (None, e.func.id)):
            out.append((v, e))
    return out


def _entries(view, display) -> list | None:
    """``(statement or element, value, key)`` of what goes into the container ``display`` (bound by
    a plain ``name = display``) in its function: the display's own elements, ``name[key] = v``,
    ``name.append(v)``; None when something else writes into it (``update``, ``setdefault``, a
    store through an unknown path)."""
    st = parent(display)
    if not isinstance(st, ast.Assign) or len(st.targets) != 1 or not isinstance(st.targets[0], ast.Name):
        # a display returned or passed on as it is: its own elements
        if isinstance(display, ast.Dict):
            return None if any(k is None for k in display.keys) else list(zip(display.values, display.values,
                                                                               display.keys))
        return [(v, v, None) for v in display.elts]
    name = st.targets[0].id
    scope = view.sem.enclosing_function(st) or view.sem.tree
    if sum(isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Load)
           for n in iter_scope_nodes(scope)) != 1:
        return None  # bound again: a store may go into another container
    out = []
    if isinstance(display, ast.Dict):
        if any(k is None for k in display.keys):
            return None
        out += [(v, v, k) for k, v in zip(display.keys, display.values)]
    elif isinstance(display, ast.List):
        out += [(v, v, None) for v in display.elts]
    for n in iter_scope_nodes(scope):
        if isinstance(n, ast.Assign):
            for t in n.targets:
                if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == name:
                    if len(n.targets) != 1:
                        return None
                    out.append((n, n.value, t.slice))
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name) \
                and n.func.value.id == name:
            if n.func.attr == "append" and len(n.args) == 1 and isinstance(parent(n), ast.Expr):
                out.append((parent(n), n.args[0], None))
            elif n.func.attr not in ("get", "items", "values", "keys", "__getitem__"):
                return None
        elif isinstance(n, (ast.AugAssign, ast.Delete)) and any(
                isinstance(x, ast.Name) and x.id == name for x in ast.walk(n)):
            return None
    return out


def _fixed_parts(key):
    """The literal text before the first and after the last formatted part of a string key
    (``f"acc_{k}_num"``: ``("acc_", "_num")``), or None when it is no string literal."""
    if isinstance(key, ast.Constant) and isinstance(key.value, str):
        return key.value, None
    if not isinstance(key, ast.JoinedStr) or not key.values:
        return None
    vals = key.values
    head = vals[0].value if isinstance(vals[0], ast.Constant) else ""
    tail = vals[-1].value if isinstance(vals[-1], ast.Constant) else ""
    return head, tail


def _distinct_keys(a, b) -> bool:
    """Two dict keys that never name one entry (``None`` for list elements: always two)."""
    if a is None and b is None:
        return True
    pa, pb = _fixed_parts(a), _fixed_parts(b)
    if pa is None or pb is None:
        return False
    if pa[1] is None and pb[1] is None:
        return pa[0] != pb[0]
    heads = not (pa[0].startswith(pb[0]) or pb[0].startswith(pa[0]))
    tails = pa[1] is not None and pb[1] is not None and not (pa[1].endswith(pb[1]) or pb[1].endswith(pa[1]))
    return heads or tails


def _before_in_block(a, b) -> bool:
    """Statement (or display element) ``a`` runs before ``b`` each time ``b`` runs, in one pass of
    their block: the same display, or ``a``'s statement earlier in the block that holds ``b``'s."""
    from .reductions import _dominates

    if not isinstance(a, ast.stmt) and not isinstance(b, ast.stmt):
        return parent(a) is parent(b)
    if not isinstance(b, ast.stmt):
        return False
    return _dominates(a if isinstance(a, ast.stmt) else parent(parent(a)), b)


def shared_entry_sums(hub, view, scope) -> list:
    """The ``SharedEntrySum`` facts of ``scope`` (see the module's docstring)."""
    from .reductions import sum_reductions

    out = []
    for red in sum_reductions(hub, view, scope):
        got = _element_loop(red, scope)
        if got is None:
            continue
        loop, cont = got
        for cv, display in _containers(hub, view, cont, loop)[:4]:
            entries = _entries(cv, display)
            if not entries or len(entries) > 64:
                continue
            hit = _shared_pair(hub, cv, entries)
            if hit is not None:
                out.append(SharedEntrySum(loop, red, hit[0], hit[1], cv, hit[2]))
                break
    return out


def _shared_pair(hub, view, entries):
    for j, (s2, v2, k2) in enumerate(entries):
        for s1, v1, k1 in entries[:j]:
            if not _distinct_keys(k1, k2) or not _before_in_block(s1, s2):
                continue
            fork = same_tensor(hub, (view, v1, s1), (view, v2, s2))
            if fork is not None:
                return s1, s2, fork
    return None


def aliased_sums(hub, view, scope) -> list:
    """``(first, second, fork)``: two ``reductions.sum_reductions`` of ``scope`` on two names of one
    tensor (``b = a``, ``b = a.view(-1)``), ``second`` over the world after ``first`` on every path
    from it, neither name read or written between them."""
    from .reductions import _dominates, _touched_between, read_after, sum_reductions

    facts = sum_reductions(hub, view, scope)
    out = []
    for i, second in enumerate(facts):
        if not second.world:
            continue
        for first in facts[:i]:
            if first.name == second.name or not _dominates(first.call, second.call):
                continue
            if any(_touched_between(view, scope, first.call, second.call, n) for n in (first.name, second.name)) \
                    or not any(read_after(scope, second.call, n) for n in (first.name, second.name)):
                continue
            a, b = _tensor_arg(first), _tensor_arg(second)
            if a is None or b is None:
                continue
            fork = same_tensor(hub, (view, a, first.call), (view, b, second.call))
            if fork is not None:
                out.append((first, second, fork))
                break
    return out


def _tensor_arg(red):
    return next((a for a in (*red.call.args, *(k.value for k in red.call.keywords))
                 if isinstance(a, ast.Name) and a.id == red.name), None)
