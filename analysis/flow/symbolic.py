"""Symbolic lengths of slices: ``x[rank * chunk:(rank + 1) * chunk]`` holds ``chunk`` elements on
every rank, whatever the rank is.

``linear(e)`` reads an integer expression as a sum of monomials (products of atoms: names,
attributes, other expressions by their text) with integer coefficients, through ``+``, ``-``,
``*`` by a constant or another monomial, and unary minus; None when it cannot. ``slice_width(sl)``
is ``upper - lower`` of a slice without a step: the atoms left in the difference decide the length
(``chunk`` above), the rank cancels out. The length holds when the slice stays within the
sequence, which the equal-shard idiom ensures (``chunk = n // world``).
"""
from __future__ import annotations

import ast

_MAX_TERMS = 16


def linear(e: ast.AST, depth: int = 0, expand=None, opaque=False):
    """{monomial: coefficient}, a monomial being a sorted tuple of atom texts (() for the
    constant term); None when ``e`` is not such a polynomial. ``expand(name_node)``: the
    expression a name stands for (its one binding), or None to keep the name as an atom.
    ``opaque``: any other expression (``a // b``, a call) is an atom by its text (its tree,
    unparsed: the spacing and parentheses of the source do not count); a predicate: only an
    expression it admits."""
    if depth > 12:
        return None
    if isinstance(e, ast.Constant) and isinstance(e.value, int) and not isinstance(e.value, bool):
        return {(): e.value} if e.value else {}
    if isinstance(e, ast.Name) and expand is not None:
        sub = expand(e)
        if sub is not None:
            return linear(sub, depth + 1, expand, opaque)
    if isinstance(e, (ast.Name, ast.Attribute)):
        return {(ast.unparse(e),): 1}
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, (ast.USub, ast.UAdd)):
        inner = linear(e.operand, depth + 1, expand, opaque)
        if inner is None:
            return None
        return {m: -c for m, c in inner.items()} if isinstance(e.op, ast.USub) else inner
    if isinstance(e, ast.BinOp) and isinstance(e.op, (ast.Add, ast.Sub, ast.Mult)):
        a, b = linear(e.left, depth + 1, expand, opaque), linear(e.right, depth + 1, expand, opaque)
        if a is None or b is None:
            return {(ast.unparse(e),): 1} if _admits(opaque, e) else None
        if isinstance(e.op, ast.Mult):
            out: dict = {}
            for ma, ca in a.items():
                for mb, cb in b.items():
                    m = tuple(sorted(ma + mb))
                    out[m] = out.get(m, 0) + ca * cb
        else:
            out = dict(a)
            sign = 1 if isinstance(e.op, ast.Add) else -1
            for m, c in b.items():
                out[m] = out.get(m, 0) + sign * c
        out = {m: c for m, c in out.items() if c}
        return out if len(out) <= _MAX_TERMS else None
    if isinstance(e, ast.expr) and _admits(opaque, e):
        return {(ast.unparse(e),): 1}
    return None


def _admits(opaque, e) -> bool:
    return opaque is True or (callable(opaque) and opaque(e))


# calls that give the same value for the same arguments: two of them spelled alike are one value
_PURE_CALLS = frozenset({"len", "int", "min", "max", "abs", "round", "ceil", "floor", "size", "numel", "dim"})
_PURE_NODES = (ast.Name, ast.Attribute, ast.Constant, ast.BinOp, ast.UnaryOp, ast.Subscript, ast.Call,
               ast.operator, ast.unaryop, ast.expr_context, ast.Tuple, ast.Slice)


def stable(e: ast.AST) -> bool:
    """``e`` gives one value wherever it is evaluated in a slice's two bounds: names, attributes,
    constants, arithmetic, entries, and calls of ``len`` / ``int`` / ``min`` / ``max`` /
    ``math.ceil`` / ``x.size(i)`` ... of such values (not ``random()``: two calls, two values)."""
    for n in ast.walk(e):
        if not isinstance(n, _PURE_NODES):
            return False
        if isinstance(n, ast.Call):
            f = n.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name not in _PURE_CALLS or n.keywords:
                return False
    return True


def slice_width(sl: ast.Slice):
    """The monomials of ``upper - lower`` of ``sl`` (no step, both bounds given), or None."""
    if not isinstance(sl, ast.Slice) or sl.step is not None or sl.lower is None or sl.upper is None:
        return None
    # (``rank * (n // 2):(rank + 1) * (n // 2)``: a sub-expression spelled alike in both bounds
    # is one atom, so the rank cancels out of the difference whatever that atom is)
    lo, up = linear(sl.lower, opaque=stable), linear(sl.upper, opaque=stable)
    if lo is None or up is None:
        return None
    out = dict(up)
    for m, c in lo.items():
        out[m] = out.get(m, 0) - c
    return {m: c for m, c in out.items() if c}


def width_atoms(sl: ast.Slice):
    """The atom expressions the width of ``sl`` depends on (nodes taken from its bounds), or None
    when the width is not a polynomial of them. An empty list: a constant width."""
    w = slice_width(sl)
    if w is None:
        return None
    names = {a for m in w for a in m}
    out, seen = [], set()
    for b in (sl.lower, sl.upper):
        for n in ast.walk(b):
            if isinstance(n, ast.expr) and not isinstance(n, ast.Constant):
                t = ast.unparse(n)
                if t in names and t not in seen:
                    seen.add(t)
                    out.append(n)
    return out if seen == names else None


def _one_binding(view, name: ast.Name):
    """The value of the one plain assignment of ``name`` that reaches it (``a, b = x, y``: the
    element at the name's place), else None."""
    from .bindings import reaching, target_path
    kind, evs = reaching(view, name.id, name)
    if kind not in ("events", "global") or not evs or len(evs) != 1 or not isinstance(evs[0], ast.Assign) \
            or len(evs[0].targets) != 1:
        return None
    v = evs[0].value
    path = target_path(evs[0].targets[0], name.id)
    while path:
        if not isinstance(v, (ast.Tuple, ast.List)) or path[0] >= len(v.elts) or any(
                isinstance(x, ast.Starred) for x in v.elts):
            return None
        v, path = v.elts[path[0]], path[1:]
    return v if path == [] else None


def _same(a, b) -> bool:
    return a is not None and b is not None and ast.dump(a) == ast.dump(b)


def _helper_return(hub, view, call):
    """(callee's view, the one returned expression, {param: argument}) of a call of a project
    function with a single ``return``; None otherwise."""
    if hub is None or not isinstance(call, ast.Call):
        return None
    from ..semantic import FUNC_TYPES, iter_scope_nodes
    from .calls import call_args
    target = hub.resolve_call(view, call)
    if target is None or not isinstance(target[1], FUNC_TYPES):
        return None
    rets = [n for n in iter_scope_nodes(target[1]) if isinstance(n, ast.Return)]
    if len(rets) != 1 or rets[0].value is None:
        return None
    return target[0], rets[0].value, dict(call_args(call, target[1]))


def chunk_count(view, seq: ast.AST, hub=None):
    """The number of pieces ``seq`` holds when it is ``pad(x, [..., -n % k]).chunk(k)`` with
    ``n`` the length of ``x`` (``x.shape[0]``, ``x.size(0)``, ``len(x)``, or a name bound to one):
    the padding makes the length a multiple of ``k``, so ``chunk`` gives exactly ``k`` pieces.
    Through a name bound once. None otherwise."""
    if isinstance(seq, ast.Name):
        seq = _one_binding(view, seq)
    inner = _helper_return(hub, view, seq)
    if inner is not None:
        # ``pieces = split_padded(x, k)``: the count in the helper, mapped back to the argument
        tv, ret, args = inner
        k = chunk_count(tv, ret)
        if isinstance(k, ast.Name) and _one_binding(tv, k) is None and k.id in args:
            return args[k.id]
        return None
    if not (isinstance(seq, ast.Call) and isinstance(seq.func, ast.Attribute) and seq.func.attr == "chunk"
            and len(seq.args) == 1 and not seq.keywords):
        return None
    k = seq.args[0]
    padded = seq.func.value
    if not (isinstance(padded, ast.Call) and (view.sem.call_qualname(padded) or "").endswith(".pad")
            and len(padded.args) >= 2 and isinstance(padded.args[1], (ast.List, ast.Tuple)) and padded.args[1].elts):
        return None
    x, amount = padded.args[0], padded.args[1].elts[-1]
    if not (isinstance(amount, ast.BinOp) and isinstance(amount.op, ast.Mod) and _same(amount.right, k)
            and isinstance(amount.left, ast.UnaryOp) and isinstance(amount.left.op, ast.USub)):
        return None
    n = amount.left.operand
    if isinstance(n, ast.Name):
        n = _one_binding(view, n)
    if _length_of(n, x):
        return k
    return None


def _length_of(n, x) -> bool:
    """``n`` is the length (dimension 0) of ``x``."""
    if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Attribute) and n.value.attr == "shape" \
            and isinstance(n.slice, ast.Constant) and n.slice.value == 0:
        return _same(n.value.value, x)
    if isinstance(n, ast.Call) and not n.keywords:
        f = n.func
        if isinstance(f, ast.Attribute) and f.attr == "size" and len(n.args) == 1 \
                and isinstance(n.args[0], ast.Constant) and n.args[0].value == 0:
            return _same(f.value, x)
        if isinstance(f, ast.Name) and f.id == "len" and len(n.args) == 1:
            return _same(n.args[0], x)
    return False


def strided_even(view, base: ast.AST, sl: ast.Slice, hub=None) -> bool:
    """``base[a::k]`` takes the same number of items on every rank: ``base`` holds a number of
    items that is a multiple of ``k`` (``chunk_count``, expanded through names bound once), and
    ``a`` (the rank) lies in ``[0, k)``, as the strided-shard idiom has it."""
    if not isinstance(sl, ast.Slice) or sl.step is None or sl.upper is not None or sl.lower is None:
        return False
    count = chunk_count(view, base, hub)
    if count is None:
        return False

    def expand(name):
        return _one_binding(view, name)

    n = linear(count, expand=expand, opaque=True)
    k = linear(sl.step, expand=expand, opaque=True)
    if not n or not k or len(k) != 1:
        return False
    (km, kc), = k.items()
    if not km or kc != 1:
        return False
    need = list(km)
    for m in n:
        rest = list(m)
        for a in need:
            if a not in rest:
                return False
            rest.remove(a)
    return True


def padding_target(view, name: ast.Name):
    """The size ``M`` that the list ``name`` holds at its use after a padding
    ``name += [fill] * (M - len(name))`` (the binding that reaches the use: a statement of the same
    block, so it always runs): its length is ``M`` whatever it was. Followed through a helper's
    returned tuple (``n, lst = helper(...)``) to the padding in the helper. Returns (view, M) or
    None."""
    from .bindings import reaching
    if not isinstance(name, ast.Name):
        return None
    kind, evs = reaching(view, name.id, name)
    if kind != "events" or not evs or len(evs) != 1:
        return None
    e = evs[0]
    if isinstance(e, ast.AugAssign) and isinstance(e.op, ast.Add) and isinstance(e.target, ast.Name):
        v = e.value
        for lst, m in ((v.left, v.right), (v.right, v.left)) if isinstance(v, ast.BinOp) and isinstance(
                v.op, ast.Mult) else ():
            if isinstance(lst, ast.List) and len(lst.elts) == 1 and isinstance(m, ast.BinOp) \
                    and isinstance(m.op, ast.Sub) and _is_len_of(m.right, e.target.id):
                return view, m.left
        return None
    return None


def _is_len_of(n, name: str) -> bool:
    return (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "len" and len(n.args) == 1
            and isinstance(n.args[0], ast.Name) and n.args[0].id == name)


def returned_padding(hub, view, name: ast.Name):
    """``padding_target`` of ``name``, or, when ``name`` is bound by unpacking the tuple a project
    helper returns (``n, lst = helper(...)``), of the returned element in the helper."""
    got = padding_target(view, name)
    if got is not None:
        return got
    from .bindings import reaching, target_path
    kind, evs = reaching(view, name.id, name)
    if kind != "events" or not evs or len(evs) != 1 or not isinstance(evs[0], ast.Assign) \
            or len(evs[0].targets) != 1:
        return None
    path = target_path(evs[0].targets[0], name.id)
    inner = _helper_return(hub, view, evs[0].value)
    if inner is None or path is None:
        return None
    tv, ret, _args = inner
    while path:
        if not isinstance(ret, ast.Tuple) or path[0] >= len(ret.elts):
            return None
        ret, path = ret.elts[path[0]], path[1:]
    return padding_target(tv, ret) if isinstance(ret, ast.Name) else None


def padded_length(ev, e: ast.Name, d: int):
    """For the evaluator ``ev``: the uniformity of the length of the list ``e`` after a padding
    to a size ``M`` (``returned_padding``): that of ``M``; None when no padding decides it."""
    got = returned_padding(ev.hub, ev.view, e)
    if got is None:
        return None
    tv, m = got
    other = ev if tv is ev.view else ev.hub.evaluator(tv)
    return other.value(m, d + 1)
