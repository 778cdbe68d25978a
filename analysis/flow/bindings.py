"""Which bindings of a name reach a use: a small, flow-aware approximation on the AST.

For a use of ``name`` at ``node`` in one scope, the candidates are:
- the textually last binding before the use that dominates it (it sits in a block enclosing the use),
  and every binding between that one and the use (conditional re-bindings);
- without a dominating binding, every binding before the use;
- bindings later in an enclosing loop's body (they reach the next iteration);
- but not a binding in the other branch of an ``if`` than the use (unless a loop around the use
  holds that ``if``), nor one after which a ``return`` (or, carried round a loop, a ``break`` of
  that loop) always leaves before the use.

Besides assignments, the in-place collectives that make a tensor equal on every rank
(``dist.all_reduce(t)``, ``dist.broadcast(t, src)``, ``dist.all_gather(out, t)``,
``dist.broadcast_object_list(objs)``, ``dist.all_gather_object(out, obj)``) are events on the
name they write: after them the value is uniform.
"""
from __future__ import annotations

import ast
from operator import attrgetter

from ..torch_api import D
from ..semantic import FUNC_TYPES, parent
from ..semantic import get_arg
from .assignments import _is_param

# collective -> position of the argument it makes equal on every rank (in place)
EQUALISERS = {
    D + "all_reduce": (0, "tensor"),
    D + "broadcast": (0, "tensor"),
    D + "all_gather": (0, "tensor_list"),
    D + "all_gather_into_tensor": (0, "output_tensor"),
    D + "_all_gather_base": (0, "output_tensor"),
    D + "broadcast_object_list": (0, "object_list"),
    D + "all_gather_object": (0, "object_list"),
    D + "all_reduce_coalesced": (0, "tensors"),
}
LOOPS = (ast.For, ast.AsyncFor, ast.While)
_SCOPES = (*FUNC_TYPES, ast.Lambda, ast.ClassDef, ast.Module)


def _pos(n: ast.AST) -> tuple[int, int]:
    return (n.lineno, n.col_offset)


_POS = attrgetter("lineno", "col_offset")  # ``_pos`` as a sort key, without a Python call


def contains(outer: ast.AST, inner: ast.AST) -> bool:
    """``inner`` lies within the source span of ``outer`` (a module holds everything). The one
    span test of the flow modules and the rules."""
    if outer.__class__ is ast.Module:
        return True
    return (outer.lineno, outer.col_offset) <= (inner.lineno, inner.col_offset) and (
        inner.end_lineno, inner.end_col_offset) <= (outer.end_lineno, outer.end_col_offset)


_contains = contains  # the module's own spelling


def stores_name(scope: ast.AST, name: str) -> bool:
    """``name`` is assigned somewhere in ``scope`` (a parameter rebound in its function: what it
    holds is no longer only what a call passes)."""
    return any(n.__class__ is ast.Name and n.id == name and n.ctx.__class__ is ast.Store for n in ast.walk(scope))


def equaliser_index(view) -> dict[tuple[ast.AST, str], list[ast.Call]]:
    """(scope, name) -> in-place equalising collectives on ``name`` in that scope."""
    got = view.memo.get("equalisers")
    if got is None:
        got = {}
        sem = view.sem
        for qn, (pos, kw) in EQUALISERS.items():
            for c in sem.calls_to(qn):
                a = get_arg(c, pos, kw)
                if isinstance(a, ast.Name):
                    got.setdefault((sem.scope_of(c), a.id), []).append(c)
        view.memo["equalisers"] = got
    return got


def binding_scope(sem, node: ast.AST) -> ast.AST:
    s = sem.scope_of(node)
    return sem.tree if isinstance(s, ast.ClassDef) else s


def _dominates_up(ev: ast.AST, up: dict, scope: ast.AST) -> bool:
    """``ev``'s statement sits directly in a block that also (transitively) holds the use: ``up``
    maps the id of each ancestor of the use, up to ``scope``, to its child on the way to the use
    (one walk up for every candidate binding)."""
    st = ev
    while st is not None and not isinstance(st, ast.stmt):
        st = getattr(st, "_p", None)
    if st is None:
        return False
    blk_owner = getattr(st, "_p", None)
    n = up.get(id(blk_owner)) if blk_owner is not None else None
    if n is None:
        return blk_owner is scope
    for f in ("body", "orelse", "finalbody"):
        lst = getattr(blk_owner, f, None)
        if isinstance(lst, list) and st in lst:
            return n in lst  # same block (an if's body does not dominate its orelse)
    return False


def _both_branches(ev: ast.AST, before: list, up: dict, scope: ast.AST) -> bool:
    """``ev`` is a statement directly in the ``orelse`` of an ``if`` (not around the use) whose
    ``body`` also holds a binding of the name directly (``if c: x = a`` / ``else: x = b``), and that
    ``if`` dominates the use (``_dominates_up``): every path rebinds the name there."""
    st = getattr(ev, "_p", None)
    if not isinstance(ev, ast.stmt) or st.__class__ is not ast.If or ev not in st.orelse or id(st) in up:
        return False
    return any(b in st.body for b in before) and _dominates_up(st, up, scope)


def reaching(view, name: str, at: ast.AST):
    """("param", fn) | ("events", [binding nodes]) | ("global", [module bindings]) | ("none", None).

    Binding nodes are Assign/AnnAssign/AugAssign/For/With/NamedExpr statements (or expressions)
    from ``Semantic.assignments``, or equalising collective calls."""
    memo = view.memo.setdefault("reaching", {})
    key = (name, at)  # the node hashes by identity
    got = memo.get(key)
    if got is None:
        got = memo[key] = _reaching(view, name, at)
    return got


_SCOPE_CLASSES = frozenset(_SCOPES)
_FUNC_CLASSES = frozenset((*FUNC_TYPES, ast.Lambda))
_FOR, _ASYNC_FOR, _WITH, _ASYNC_WITH = ast.For, ast.AsyncFor, ast.With, ast.AsyncWith
_LOOP_CLASSES = frozenset(LOOPS)
_WITH_CLASSES = frozenset((ast.With, ast.AsyncWith))
# statements whose parts are not all before their nested statements (a later ``case`` pattern or
# ``except`` clause comes after an earlier one's body): a use there has no statement-wide answer
_TRY_CLASSES = frozenset((ast.Try, *((ast.TryStar,) if hasattr(ast, "TryStar") else ())))
_INTERLEAVED = (ast.Match, *_TRY_CLASSES)


def _reaching(view, name: str, at: ast.AST):
    sem = view.sem
    # one walk up from the use: its innermost statement and its scope (``binding_scope``)
    stmt = at if isinstance(at, ast.stmt) else None
    n = getattr(at, "_p", None)
    scope = at
    while n is not None:
        if stmt is None and isinstance(n, ast.stmt):
            stmt = n
        if n.__class__ in _SCOPE_CLASSES:
            scope = n
            break
        n = getattr(n, "_p", None)
    if scope.__class__ is ast.ClassDef:
        scope = sem.tree
    evs = sem.assignments(scope).get(name, ())
    eqi = view.memo.get("equalisers")
    if eqi is None:
        eqi = equaliser_index(view)
    eqs = eqi.get((scope, name), ()) if eqi else ()
    if not evs and not eqs:
        return _unbound(view, name, scope)  # no binding in the scope: nothing depends on ``at``
    # Every use strictly inside one statement gets the same answer when the bindings are all
    # statements (no walrus, no in-place collective inside an expression): each binding lies
    # before, after, around or inside that statement as a whole (the statement's own parts come
    # before its nested statements, except in ``match``/``try``). Keyed per statement.
    key = None
    if stmt is not None and not eqs and not sem._walrus and not isinstance(stmt, _INTERLEAVED):
        key = (name, stmt, stmt is at, scope)
        memo = view.memo.get("reaching_stmt")
        if memo is None:
            memo = view.memo["reaching_stmt"] = {}
        got = memo.get(key)
        if got is None:
            got = memo[key] = _reaching_events(view, name, at, scope, list(evs))
        return got
    return _reaching_events(view, name, at, scope, [*evs, *eqs])


def _unbound(view, name: str, scope: ast.AST):
    """``_reaching_events`` without a binding of ``name`` in ``scope``."""
    if scope.__class__ in _FUNC_CLASSES:
        if _is_param(scope, name):
            return "param", scope
        if scope.__class__ is ast.Lambda and getattr(scope, "_p", None) is not None:
            # a free name of a lambda: the enclosing scope's binding where the lambda is made
            return reaching(view, name, scope)
        sem = view.sem
        mod = list(sem.assignments(sem.tree).get(name, ()))
        mod += equaliser_index(view).get((sem.tree, name), ())
        if mod:
            return "global", mod
    return "none", None


def _reaching_events(view, name: str, at: ast.AST, scope: ast.AST, evs: list):
    if not evs:
        return _unbound(view, name, scope)
    ap = (at.lineno, at.col_offset)
    aend = (at.end_lineno, at.end_col_offset)
    before = []
    for e in evs:
        if (e.lineno, e.col_offset) < ap:
            if aend <= (e.end_lineno, e.end_col_offset):  # e holds the use (``_contains``)
                # ``x = f(x)``: the use reads the earlier binding; a loop/with body sees its target
                t = e.__class__
                if t is _FOR or t is _ASYNC_FOR:
                    if any(_contains(s, at) for s in e.body):
                        before.append(e)
                elif t is _WITH or t is _ASYNC_WITH:
                    before.append(e)
                continue
            before.append(e)
    if len(before) > 1:
        before.sort(key=_POS)
    # loop-carried: bindings later in an enclosing loop (same scope) reach the next iteration
    later = []
    up, loops = _up_of(at, scope)
    dom = None
    for i in range(len(before) - 1, -1, -1):
        if _dominates_up(before[i], up, scope):
            dom = i
            break
        if _both_branches(before[i], before, up, scope):  # from the first binding in that ``if``
            dom = next(k for k, b in enumerate(before) if getattr(b, "_p", None) is before[i]._p)
            break
    for n in loops:
        # a binding inside the loop that dominates the use (a ``for`` target, an assignment
        # earlier in the body) rebinds the name on every iteration before the use: the loop's
        # later bindings never reach it
        if dom is not None and _contains(n, before[dom]):
            continue
        for e in evs:
            if (e.lineno, e.col_offset) > ap and _contains(n, e) and e not in later:
                later.append(e)
    if dom is not None:
        cands = before[dom:]
    else:
        cands = before
    # a binding in the other branch of an ``if`` than the use (outside any loop that holds both),
    # or one that an unconditional ``return``/``raise`` ends the path of, does not reach it
    dom_ev = before[dom] if dom is not None else None
    cands = [e for e in cands if not _cut_off(e, up, loops, scope, dom_ev=dom_ev)]
    later = [e for e in later if not _cut_off(e, up, loops, scope, carried=True)]
    if dom is None and scope.__class__ in _FUNC_CLASSES and _is_param(scope, name):
        return ("events+param", cands + later) if (cands or later) else ("param", scope)
    return "events", cands + later


def _up_of(at: ast.AST, scope: ast.AST) -> tuple[dict, list]:
    """On the way up from ``at`` to ``scope``: id(ancestor) -> its child towards ``at`` (for
    ``_dominates_up``, the scope included), and the loops passed."""
    up = {}
    loops = []
    child, n = at, getattr(at, "_p", None)
    while n is not None and n is not scope:
        up[id(n)] = child
        if n.__class__ in _LOOP_CLASSES:
            loops.append(n)
        child, n = n, getattr(n, "_p", None)
    if n is not None:
        up[id(n)] = child  # the scope: its child holding ``at``
    return up, loops


def cut_from(start: ast.stmt, at: ast.AST, scope: ast.AST, stops=None) -> bool:
    """No feasible path from the start of the statement ``start`` (before it runs) reaches ``at``
    in ``scope``: what holds there (a name left unbound on that path) never gets to the use. The
    rules of ``_cut_off`` for a binding made just before ``start``, ``start`` itself counted: a
    ``return`` (or a ``raise`` outside any ``try``) from ``start`` on in its block or an enclosing
    one on the way to the use leaves first; ``stops(stmt)``: the caller's word that a statement
    never falls through (a call that never returns, an ``if`` both of whose branches leave)."""
    up, loops = _up_of(at, scope)
    return _cut_off(start, up, loops, scope, inclusive=True, stops=stops)


def _cut_off(ev: ast.AST, up: dict, loops: list, scope: ast.AST, carried: bool = False,
             dom_ev: ast.AST | None = None, inclusive: bool = False, stops=None) -> bool:
    """No feasible path takes the binding ``ev`` to the use (``up``: the use's ancestors, as in
    ``_dominates_up``; ``loops``: the loops around the use, inside its scope):
    - ``ev`` is in one branch of an ``if`` and the use in the other, and no loop around the use
      holds that ``if`` (a later iteration could take the other branch);
    - after ``ev``'s statement, in its block or an enclosing one on the way to the use, a
      ``return`` always leaves first (unless a ``try`` holds both: its ``finally`` runs), or a
      ``raise`` outside any ``try`` of the scope;
    - after ``ev``, a ``break`` or ``continue`` of a loop around the use always leaves first, and
      every way back to the use passes ``dom_ev`` (the binding that dominates the use) first
      (``_jump_cuts``);
    - ``carried`` (``ev`` reaches the use in the next iteration of the loops around both): after
      it, on the way up to the outermost of those loops, a ``return``, or a ``break`` of that loop
      (not of one nested in it), always leaves first.
    ``inclusive``: ``ev``'s own statement counts among those after it (``cut_from``); ``stops``: a
    statement the caller knows never falls through leaves like a ``return``."""
    chain = []  # (ancestor, its child towards ``ev``), up to the first ancestor of the use
    child, n = ev, getattr(ev, "_p", None)
    while n is not None and id(n) not in up:
        chain.append((n, child))
        child, n = n, getattr(n, "_p", None)
    if n is None:
        return False
    lca, lca_child = n, child
    if carried:
        outer = next((lp for lp in reversed(loops) if _contains(lp, ev)), None)
        if outer is None:
            return False
        # from the common ancestor on, up to the loop that carries: the rest of each block runs too
        while n is not outer and n is not scope and n is not None:
            chain.append((n, child))
            child, n = n, getattr(n, "_p", None)
        chain.append((outer, child))
    elif lca.__class__ is ast.If and lca_child is not lca.test and up[id(lca)] is not lca.test \
            and (lca_child in lca.body) != (up[id(lca)] in lca.body) \
            and not any(lp is not lca and _contains(lp, lca) for lp in loops):
        return True
    if lca.__class__ in _TRY_CLASSES:
        return False
    raises = _untried(ev, scope)
    # a ``break`` at level i leaves the carrying loop when no loop lies between (chain[i:-1])
    inner = [n.__class__ in _LOOP_CLASSES for n, _ in chain[:-1]] + [False]
    for i in range(len(inner) - 2, -1, -1):
        inner[i] = inner[i] or inner[i + 1]
    for i, (n, child) in enumerate(chain):
        if isinstance(child, ast.stmt):
            for f in ("body", "orelse"):
                blk = getattr(n, f, None)
                if isinstance(blk, list) and child in blk:
                    if n.__class__ in _TRY_CLASSES:
                        break
                    if f == "orelse" and n.__class__ in _LOOP_CLASSES:
                        break  # a loop's ``else``: its ``break`` is not the loop's
                    breaks = carried and not inner[i]
                    for st in blk[blk.index(child) + (0 if inclusive and i == 0 else 1):]:
                        t = st.__class__
                        if t is ast.Return or (breaks and t is ast.Break) or (t is ast.Raise and raises):
                            return True
                        if stops is not None and stops(st):
                            return True
                        if not carried and (t is ast.Break or t is ast.Continue) \
                                and _jump_cuts(st, n, up, scope, dom_ev, ev):
                            return True
                    break
    if not carried:
        # the common ancestor's block: a ``return`` between ``ev`` and the use
        for f in ("body", "orelse"):
            blk = getattr(lca, f, None)
            if isinstance(blk, list) and lca_child in blk and up[id(lca)] in blk:
                a, b = blk.index(lca_child), blk.index(up[id(lca)])
                if any(st.__class__ is ast.Return or (stops is not None and stops(st))
                       for st in blk[a + (0 if inclusive and lca_child is ev else 1):b]):
                    return True
    return False


def _untried(ev: ast.AST, scope: ast.AST) -> bool:
    """No ``try`` of the scope holds ``ev``: a ``raise`` after it leaves the scope."""
    n = getattr(ev, "_p", None)
    while n is not None and n is not scope:
        if n.__class__ in _TRY_CLASSES or n.__class__ in _WITH_CLASSES:
            return False  # a handler (or a context manager that swallows) may resume the path
        n = getattr(n, "_p", None)
    return True


def _jump_cuts(jump: ast.stmt, owner: ast.AST, up: dict, scope: ast.AST, dom_ev, binding) -> bool:
    """``jump`` (a ``break``/``continue`` in a block of ``owner``) leaves the path of a binding
    before it to the use (``up``: the use's ancestors): it belongs to a loop ``L`` around the use
    (not one nested between), and each way back to the use enters ``L`` again from its head
    (``continue``) or from the head of the innermost loop around ``L`` (``break``), so it passes
    ``dom_ev`` when that loop holds it; a ``break`` with no loop around ``L`` ends the path."""
    n = owner
    while n is not None and n is not scope and n.__class__ not in _LOOP_CLASSES:
        if n.__class__ in _FUNC_CLASSES:
            return False
        n = getattr(n, "_p", None)
    if n is None or n is scope or id(n) not in up:
        return False  # the jump's loop does not hold the use: the path goes on after it
    if jump.__class__ is ast.Continue:
        back = n
    else:
        back = getattr(n, "_p", None)
        while back is not None and back is not scope and back.__class__ not in _LOOP_CLASSES:
            back = getattr(back, "_p", None)
        if back is None or back is scope:
            return True  # no loop around ``L``: nothing comes back to the use
    return dom_ev is not None and _contains(back, dom_ev) and dom_ev is not back and dom_ev is not binding


def target_path(target: ast.AST, name: str) -> list[int] | None:
    """Index path of ``name`` inside a (nested) tuple target: ``(a, (b, c))`` -> c: [1, 1]."""
    if isinstance(target, ast.Name):
        return [] if target.id == name else None
    if isinstance(target, ast.Starred):
        return target_path(target.value, name)
    if isinstance(target, (ast.Tuple, ast.List)):
        for i, e in enumerate(target.elts):
            got = target_path(e, name)
            if got is not None:
                return [i, *got]
    return None


_COMPS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


def comp_binder(use: ast.Name):
    """The ``for`` clause (an ``ast.comprehension``) of an enclosing comprehension that binds
    ``use``'s name, else None. A clause sees the targets of the clauses before it (and its own in
    its ``if`` tests, not in its iterable); the element sees them all."""
    child, p = use, parent(use)
    while p is not None and not isinstance(p, _SCOPES):
        if p.__class__ in _COMPS:
            gens = p.generators
            if child in gens:
                k = gens.index(child)
                usable = gens[:k] if _contains(child.iter, use) else gens[:k + 1]
            else:
                usable = gens
            for g in reversed(usable):
                if target_path(g.target, use.id) is not None:
                    return g
        child, p = p, parent(p)
    return None


def searches_rank(loop: ast.AST, ev: ast.stmt, name: str) -> bool:
    """``while rank not in perm[start:start + k]: start += k``: a counter the loop advances while a
    test on the rank holds ends at a place that depends on the rank, as ``rank // k`` does (a value
    set once under ``if rank == 0:`` is left to the broadcast that may follow it, unseen)."""
    return isinstance(loop, ast.While) and isinstance(ev, ast.AugAssign) and isinstance(ev.target, ast.Name) \
        and ev.target.id == name and any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(loop.test))



def closure_definition(view, name: str, at: ast.AST):
    """The nested function definition in which the read ``at`` of ``name`` is a free name that
    the enclosing function binds (``def save(): Pipeline(unet=unet)`` inside ``main``, which binds
    ``unet``), where every binding of it in the enclosing function comes before that definition:
    the value any call of the nested function sees is then the one reaching the definition
    (``reaching(view, name, definition)``). None otherwise (a later rebinding could be the one
    a call sees)."""
    sem = view.sem
    fn = sem.enclosing_function(at)
    if fn is None or fn.__class__ is ast.Lambda or _is_param(fn, name) or sem.assignments(fn).get(name):
        return None
    for n in ast.walk(fn):
        if isinstance(n, (ast.Global, ast.Nonlocal)) and name in n.names:
            return None
    outer = sem.enclosing_function(fn)
    if outer is None or outer.__class__ is ast.Lambda:
        return None
    evs = sem.assignments(outer).get(name, ())
    if not evs or any((e.lineno, e.col_offset) > (fn.lineno, fn.col_offset) for e in evs):
        return None
    return fn
