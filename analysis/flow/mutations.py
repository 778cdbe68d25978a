"""Containers filled after their binding: ``flat = {}`` then ``flat[k] = v``, ``out.append(x)``,
``stats.update(d)``, or ``fill(flat)`` (a call that may write into what it receives).

A name's binding says what the container held when it was made; what a use sees also depends on
what was put into it since. ``mutations(view, name, use)`` gives the writes into ``name`` that may
come between the bindings reaching ``use`` and ``use`` (in the same scope: earlier in source order,
or anywhere in a loop that holds the use, which reaches the next iteration): for each, the
expressions stored (``None``: the write is a call whose effect is unknown).
``uniformity.Evaluator`` joins their values into the name's value, so that a container filled with
this rank's data is rank-varying and one filled by an unknown call is unknown, never uniform
because its literal was.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, parent
from .bindings import EQUALISERS, LOOPS, binding_scope, contains as _contains

# methods that put their arguments into the receiver
MUTATORS = frozenset({"append", "extend", "insert", "add", "update", "setdefault", "__setitem__",
                      "appendleft", "extendleft", "put", "put_nowait", "copy_", "fill_", "add_",
                      "mul_", "sub_", "div_", "index_put_", "scatter_", "masked_fill_"})
# plain functions that read their argument and never write into it
_READERS = frozenset({"len", "print", "isinstance", "str", "repr", "bool", "int", "float", "list", "tuple",
                      "dict", "set", "sorted", "sum", "min", "max", "any", "all", "enumerate", "zip", "iter",
                      "id", "hash", "type", "range", "reversed", "format", "getattr", "hasattr", "abs",
                      "round", "next", "map", "filter", "vars", "frozenset", "issubclass", "callable"})


def _base_name(e: ast.AST) -> str | None:
    """``x`` of ``x[k]``, ``x[k][j]``, ``x.attr[k]``: the container written into (a plain name)."""
    while isinstance(e, (ast.Subscript, ast.Attribute)):
        e = e.value
    return e.id if isinstance(e, ast.Name) else None


def index(view) -> dict:
    """(scope, name) -> [(node, stored expressions or None)] for the writes of the module, in
    source order (once per module view, from the traversal's indexes: its assignments by type and
    its calls; no walk of the tree). Two writes at one position are nested calls
    (``g(x).h(x)``): the outer one, which ends later, comes first."""
    got = view.memo.get("mutations.index")
    if got is not None:
        return got
    got = view.memo["mutations.index"] = {}
    sem = view.sem
    eq = frozenset(EQUALISERS)

    def add(node, name, values):
        got.setdefault((binding_scope(sem, node), name), []).append((node, values))

    by_type = sem.by_type
    for t in (ast.Assign, ast.AugAssign, ast.AnnAssign):  # always indexed (semantic._BINDING_STMTS)
        for n in by_type.get(t, ()):
            for tgt in (n.targets if t is ast.Assign else (n.target,)):
                for x in ast.walk(tgt) if isinstance(tgt, (ast.Tuple, ast.List)) else (tgt,):
                    if isinstance(x, ast.Subscript):
                        b = _base_name(x)
                        if b is not None and n.value is not None:
                            add(n, b, (n.value,))
    for n in sem.calls:
        f = n.func
        if isinstance(f, ast.Attribute) and f.attr in MUTATORS:
            b = _base_name(f.value)
            if b is not None:
                add(n, b, tuple(a.value if isinstance(a, ast.Starred) else a
                                for a in (*n.args, *(k.value for k in n.keywords))))
            continue
        if isinstance(f, ast.Name) and f.id in _READERS and sem.qualname(f) is None:
            continue
        if (sem.call_qualname(n) or "") in eq:
            continue  # an equalising collective: a binding event of its own (``bindings``)
        for a in (*n.args, *(k.value for k in n.keywords)):
            if isinstance(a, ast.Starred):
                a = a.value
            if isinstance(a, ast.Name):
                add(n, a.id, None)
    for lst in got.values():
        lst.sort(key=_write_order)
    return got


def _write_order(p):
    n = p[0]
    return (n.lineno, n.col_offset, -(n.end_lineno or 0), -(n.end_col_offset or 0))


def _pos(n):
    return (n.lineno, n.col_offset)


def _in_loop_with(node, use, scope) -> bool:
    """``node`` and ``use`` share a loop of ``scope`` (the write reaches the next iteration)."""
    p = getattr(use, "_p", None)
    while p is not None and p is not scope and not isinstance(p, (*FUNC_TYPES, ast.Lambda, ast.ClassDef)):
        if isinstance(p, LOOPS) and _pos(p) <= _pos(node) and (node.end_lineno, node.end_col_offset) <= (
                p.end_lineno, p.end_col_offset):
            return True
        p = getattr(p, "_p", None)
    return False


def mutations(view, name: str, use: ast.AST, bindings) -> list:
    """The writes into ``name`` (see ``index``) that may reach ``use`` after one of ``bindings``
    (the binding nodes ``reaching`` gave for it)."""
    sem = view.sem
    scope = binding_scope(sem, use)
    idx = index(view)
    writes = idx.get((scope, name)) or []
    starts = [_pos(b) for b in bindings if hasattr(b, "lineno")]
    if not starts:
        return []
    first, at = min(starts), _pos(use)
    out = []
    if scope is not sem.tree and any(hasattr(b, "lineno") and binding_scope(sem, b) is sem.tree for b in bindings):
        # a global read in a function: the module's own writes into it after its binding run at
        # import (``DEFAULTS = dict(...)`` then ``DEFAULTS.update(more())``), before any call
        out.extend((node, values) for node, values in idx.get((sem.tree, name), ()) if _pos(node) > first)
    for node, values in writes:
        if _contains(node, use):
            continue  # the use is part of the write itself (``x.append(x[0])``)
        p = _pos(node)
        if (first < p < at) or (p > first and _in_loop_with(node, use, scope)):
            out.append((node, values))
    return out


_CONTAINER_CTORS = frozenset({"dict", "list", "set", "collections.defaultdict", "collections.OrderedDict",
                              "collections.deque", "defaultdict", "OrderedDict", "deque"})


def is_container_binding(sem, ev: ast.AST) -> bool:
    """``ev`` binds a fresh mutable container: a list, dict or set display or comprehension, or a
    call of ``dict``/``list``/``set``/``collections.defaultdict``/``OrderedDict``/``deque``."""
    v = getattr(ev, "value", None)
    if not isinstance(ev, (ast.Assign, ast.AnnAssign)) or v is None:
        return False
    if isinstance(v, (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)):
        return True
    if isinstance(v, ast.Call):
        qn = sem.call_qualname(v)
        if qn is None and isinstance(v.func, ast.Name):
            qn = v.func.id
        return qn in _CONTAINER_CTORS
    return False


def written_values(ev, e: ast.Name, bindings, d: int) -> list:
    """For the evaluator ``ev``: the values put into the container ``e`` names after its
    bindings: what ``x[k] = v`` / ``x.append(v)`` store; unknown for a fresh container handed to
    a call that may fill it (``rec(nested, "", flat)``). A write that reaches ``e`` only where
    the world has one process (``world.alone_only``: the object is all-reduced in place under
    ``if dist.is_initialized():`` after it) puts nothing rank-varying there."""
    from .values import X
    muts = mutations(ev.view, e.id, e, bindings)
    if not muts:
        return []
    from .world import alone_only  # lazy: world sits above this module's users
    out = []
    fresh = None
    for node, values in muts:
        st = node
        while st is not None and not isinstance(st, ast.stmt):
            st = parent(st)
        if st is not None and alone_only(ev, st, e):
            continue  # made equal in place (``dist.all_reduce(x)``) wherever other ranks exist
        if values is None:
            if fresh is None:
                fresh = any(is_container_binding(ev.sem, b) for b in bindings)
            if fresh:
                out.append(X)
        else:
            out.extend(ev.value(x, d) for x in values)
    return out


# calls that take items out of a container (not in ``index``: they store nothing)
_SHRINKERS = frozenset({"pop", "popitem", "popleft", "remove", "discard", "clear"})
_EMPTY_CTORS = frozenset({"dict", "list", "set", "collections.OrderedDict", "OrderedDict", "tuple"})


def _shrunk(view, scope, name: str) -> bool:
    """``name`` loses items somewhere in ``scope`` (``name.pop(k)``, ``del name[k]``)."""
    memo = view.memo.setdefault("mutations.shrunk", {})
    got = memo.get(id(scope))
    if got is None:
        got = memo[id(scope)] = set()
        for n in ast.walk(scope):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _SHRINKERS \
                    and isinstance(n.func.value, ast.Name):
                got.add(n.func.value.id)
            elif isinstance(n, ast.Delete):
                got.update(b for t in n.targets if (b := _base_name(t)) is not None)
    return name in got


def _fixed_extent(ev, value: ast.AST, d: int, outer: bool = False):
    """The uniformity of how many items (keys) the container ``value`` builds, and whether it is a
    dict; None when it is no fresh container of a known extent (a ``defaultdict`` adds the keys
    it is read with). ``outer``: ``value`` is what a helper returns, read in the helper; there a
    name of the helper is followed to its own bindings, and any value the same on every rank
    (``glob.glob(...)`` of a shared folder) has a length the same on every rank."""
    from .values import U, X, join
    if d > 12:
        return None
    if isinstance(value, (ast.List, ast.Tuple)) and not any(isinstance(x, ast.Starred) for x in value.elts):
        return U, False
    if isinstance(value, ast.Dict) and all(k is not None for k in value.keys):
        v = join(ev.value(k, d) for k in value.keys)
        return (v if v.uniform else X), True  # rank-varying keys may still be as many
    if isinstance(value, ast.ListComp) and not any(g.ifs for g in value.generators):
        return join(ev.trip_count(g.iter, d + 1) for g in value.generators), False
    if isinstance(value, ast.IfExp):  # ``[f(rank)] if n == world else []``: as many as the test says
        arms = [_fixed_extent(ev, a, d, outer) for a in (value.body, value.orelse)]
        if None in arms:
            return None
        return join([ev.value(value.test, d), *(a[0] for a in arms)]), any(a[1] for a in arms)
    if isinstance(value, ast.Call) and not value.args and not value.keywords:
        qn = ev.sem.call_qualname(value) or (value.func.id if isinstance(value.func, ast.Name) else None)
        if qn in _EMPTY_CTORS:
            return U, qn not in ("list", "tuple")
    if outer:  # an element a helper returns: a name of the helper, or any value the same on every rank
        from .bindings import reaching  # one binding only: which of several a branch picks is a question of its own
        got = container_length(ev, value, d + 1) if isinstance(value, ast.Name) \
            and len(reaching(ev.view, value.id, value)[1] or ()) == 1 else None
        v = got if got is not None else ev.value(value, d)
        return (v, True) if not v.varying else None
    return None


def _returned_extent(ev, b: ast.AST, name: str, d: int):
    """``keys, values = load_files(root, rank=rank)``: the extent of the element ``name`` unpacks
    from a project function's returns, each a tuple whose element there is a container of a known
    extent (read in the function's own module); None when any is not."""
    from .bindings import target_path
    from .returns_at import arity_of, tuple_returns
    from .values import join
    if not (isinstance(b, ast.Assign) and len(b.targets) == 1 and isinstance(b.value, ast.Call)):
        return None
    path = target_path(b.targets[0], name)
    target = ev.hub.resolve_call(ev.view, b.value) if path is not None and len(path) == 1 else None
    if target is None or isinstance(target[1], ast.Lambda) or target[1].name == "__init__":
        return None
    fit = tuple_returns(target[1], path[0], arity_of(b.targets[0]))
    if fit is None:
        return None
    ev.hub._view_stack.append(target[0])
    try:
        inner = ev.hub.evaluator(target[0])
        got = [_fixed_extent(inner, r.elts[path[0]], d + 1, True) for r in fit]
    finally:
        ev.hub._view_stack.pop()
    return None if None in got else (join(g[0] for g in got), any(g[1] for g in got))


def bound_part(b: ast.AST, name: str):
    """The expression the assignment ``b`` binds ``name`` to, also an element of a tuple display
    (``outs, names = [], ("a", "b")``); None for anything else."""
    from .bindings import target_path
    if not (isinstance(b, ast.Assign) and len(b.targets) == 1):
        return None
    path, v = target_path(b.targets[0], name), b.value
    while path and isinstance(v, (ast.Tuple, ast.List)) and len(v.elts) > path[0] \
            and not any(isinstance(x, ast.Starred) for x in v.elts):
        v, path = v.elts[path[0]], path[1:]
    return v if path == [] else None


def container_length(ev, e: ast.Name, d: int):
    """For the evaluator ``ev``: the uniformity of the number of items (keys) of the container
    ``e`` names, when its bindings make containers of a uniform extent and what is written into
    it since never adds an item to it: writes into its elements (``out[i][key] = v``,
    ``out[i].append(v)``) and stores at an index of a list leave its length (its key set) as it
    was, whatever values they store. None when anything else may grow or shrink it (``append``,
    a new key, a call it is handed to): the question is then one of its contents."""
    from .bindings import reaching
    kind, evs = reaching(ev.view, e.id, e)
    if kind != "events" or not evs:
        return None
    vals, is_dict = [], False
    for b in evs:
        got = _fixed_extent(ev, v, d) if (v := bound_part(b, e.id)) is not None else _returned_extent(ev, b, e.id, d)
        if got is None:
            return None
        vals.append(got[0])
        is_dict = is_dict or got[1]
    for node, values in mutations(ev.view, e.id, e, evs):
        if values is None:
            return None  # handed to a call that may fill it
        if isinstance(node, ast.Call):
            if isinstance(node.func.value, ast.Name):
                return None  # ``out.append(v)``: an item of its own
            continue
        for tgt in (node.targets if isinstance(node, ast.Assign) else (node.target,)):
            for x in ast.walk(tgt) if isinstance(tgt, (ast.Tuple, ast.List)) else (tgt,):
                if isinstance(x, ast.Subscript) and isinstance(x.value, ast.Name) and x.value.id == e.id \
                        and (is_dict or isinstance(x.slice, ast.Slice)):
                    return None  # a new key, or a slice that may change the length
    if _shrunk(ev.view, binding_scope(ev.sem, e), e.id):
        return None
    from .values import join
    return join(vals)


_GROWERS = frozenset({"append", "extend", "insert", "add", "appendleft", "extendleft"})


def grown_under_test(ev, e: ast.Name, d: int):
    """For the evaluator ``ev``: a rank-varying value when the list (set) ``e`` names gets an item
    (``append``, ``extend``, ``insert``, ``add``) only where a test on this rank's data, the clock
    or random numbers holds, a test that does not also decide the use (``if y.sum() > 0:
    found.append(i)`` in a loop over this rank's batches, then ``len(found)``): its length is then
    this rank's own. None otherwise (a test on the rank itself is left out, as for a binding:
    ``uniformity._control_dependent``)."""
    from .bindings import reaching
    from .values import CLOCK, DATA, RNG, Value
    kind, evs = reaching(ev.view, e.id, e)
    if kind != "events" or not evs:
        return None
    for node, values in mutations(ev.view, e.id, e, evs):
        f = node.func if isinstance(node, ast.Call) else None
        if not (isinstance(f, ast.Attribute) and f.attr in _GROWERS and isinstance(f.value, ast.Name)):
            continue
        child, p = node, getattr(node, "_p", None)
        while p is not None and not isinstance(p, (*FUNC_TYPES, ast.Lambda, ast.ClassDef, ast.Module)):
            if isinstance(p, (ast.If, ast.While)) and child is not p.test and not _contains(p, e):
                v = ev.value(p.test, d + 1)
                if v.varying and v.src.cat in (DATA, RNG, CLOCK):
                    return Value("V", v.src.step(f"which decides whether line {node.lineno} adds an item to `{e.id}`"))
            child, p = p, getattr(p, "_p", None)
    return None


_EMPTY_DICTS = frozenset({"dict", "collections.OrderedDict", "OrderedDict"})


def item_keys(ev, it: ast.AST, path, d: int):
    """For the evaluator ``ev``: the value of the key a loop or a comprehension takes from a dict,
    apart from its values (``for k, v in x.items()``, ``for k in x.keys()``); None for any other
    iteration."""
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and not it.args and not it.keywords
            and ev.sem.qualname(it.func) is None):
        return None
    if (it.func.attr == "items" and path and path[0] == 0 and len(path) == 1) or (it.func.attr == "keys" and path == []):
        return keys_value(ev, it.func.value, d)
    return None


_ORDERINGS = frozenset({"sorted", "list", "tuple", "reversed", "iter", "set"})


def iterated_keys(ev, it: ast.AST, path, d: int):
    """For the evaluator ``ev``: the value of the key a loop or a comprehension takes when it
    iterates a dict itself (``for k in x``, ``sorted(x, key=f)``), which yields its keys, apart
    from its values; None unless ``x`` is a dict: a local name bound only to dict displays,
    comprehensions or empty dicts, or a name the loop reads back at its own variable (``x[k]``,
    which a data loader or a list of this rank's items would not be read with): keys unknown then
    (``keys_value``) unless its bindings show them."""
    got = item_keys(ev, it, path, d)
    if got is not None or path != []:
        return got
    x = it
    while isinstance(x, ast.Call) and x.args and isinstance(x.func, ast.Name) and x.func.id in _ORDERINGS \
            and ev.sem.qualname(x.func) is None and not any(k.arg != "key" for k in x.keywords):
        x = x.args[0]
    if not isinstance(x, ast.Name):
        return None
    if _dict_bound(ev, x) or _reads_back(it, x.id):
        return keys_value(ev, x, d)
    return None


def _dict_bound(ev, x: ast.Name) -> bool:
    from .bindings import reaching
    kind, evs = reaching(ev.view, x.id, x)
    if kind != "events" or not evs:
        return False
    for b in evs:
        v = bound_part(b, x.id)
        if not (isinstance(v, (ast.Dict, ast.DictComp)) or isinstance(v, ast.Call) and not v.args and not v.keywords
                and (ev.sem.call_qualname(v) or getattr(v.func, "id", None)) in _EMPTY_DICTS):
            return False
    return True


def _reads_back(it: ast.AST, name: str) -> bool:
    """The loop (or comprehension) that iterates ``it`` reads ``name[<its variable>]``."""
    n, child = getattr(it, "_p", None), it
    while n is not None and not isinstance(n, (ast.For, ast.AsyncFor, ast.comprehension)):
        if isinstance(n, (*FUNC_TYPES, ast.Lambda, ast.ClassDef, ast.stmt)):
            return False
        n, child = getattr(n, "_p", None), n
    if n is None or n.iter is not child or not isinstance(n.target, ast.Name):
        return False
    var = n.target.id
    region = n.body if isinstance(n, (ast.For, ast.AsyncFor)) else [getattr(n, "_p", None)]
    for stmt in region:
        for s in ast.walk(stmt) if stmt is not None else ():
            if isinstance(s, ast.Subscript) and isinstance(s.value, ast.Name) and s.value.id == name \
                    and isinstance(s.slice, ast.Name) and s.slice.id == var and isinstance(s.ctx, ast.Load):
                return True
    return False


def keys_value(ev, x: ast.AST, d: int):
    """The uniformity of the keys of the dict the name ``x`` holds, apart from its values: a dict
    that stores this rank's tensors under constant keys has the same keys on every rank. Judged for
    a local name bound to dict displays, dict comprehensions (their key expression) or empty dicts,
    with the keys its subscript stores add (writes into its values add none); rank-varying where
    one of those keys is; unknown for anything else (a parameter, a call's result, ``update``)."""
    from .values import U, X, join
    if not isinstance(x, ast.Name):
        return X
    from .bindings import reaching
    kind, evs = reaching(ev.view, x.id, x)
    if kind != "events" or not evs:
        return X
    vals = []
    for b in evs:
        v = bound_part(b, x.id)
        if isinstance(v, ast.Dict) and all(k is not None for k in v.keys):
            vals.extend(ev.value(k, d) for k in v.keys)
        elif isinstance(v, ast.DictComp):
            vals.append(ev.value(v.key, d))
        elif not (isinstance(v, ast.Call) and not v.args and not v.keywords and (
                ev.sem.call_qualname(v) or getattr(v.func, "id", None)) in _EMPTY_DICTS):
            return X
    for node, stored in mutations(ev.view, x.id, x, evs):
        if stored is None or isinstance(node, ast.Call) and isinstance(node.func.value, ast.Name):
            return X  # a call that may add keys (``x.update(y)``, ``fill(x)``)
        if isinstance(node, ast.Call):
            continue  # into one of its values (``x[k].append(v)``)
        for tgt in (node.targets if isinstance(node, ast.Assign) else (node.target,)):
            for s in ast.walk(tgt) if isinstance(tgt, (ast.Tuple, ast.List)) else (tgt,):
                if isinstance(s, ast.Subscript) and isinstance(s.value, ast.Name) and s.value.id == x.id:
                    vals.append(ev.value(s.slice, d))
    return join(vals) if vals else U
