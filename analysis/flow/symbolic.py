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


def linear(e: ast.AST, depth: int = 0):
    """{monomial: coefficient}, a monomial being a sorted tuple of atom texts (() for the
    constant term); None when ``e`` is not such a polynomial."""
    if depth > 12:
        return None
    if isinstance(e, ast.Constant) and isinstance(e.value, int) and not isinstance(e.value, bool):
        return {(): e.value} if e.value else {}
    if isinstance(e, (ast.Name, ast.Attribute)):
        return {(ast.unparse(e),): 1}
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, (ast.USub, ast.UAdd)):
        inner = linear(e.operand, depth + 1)
        if inner is None:
            return None
        return {m: -c for m, c in inner.items()} if isinstance(e.op, ast.USub) else inner
    if isinstance(e, ast.BinOp) and isinstance(e.op, (ast.Add, ast.Sub, ast.Mult)):
        a, b = linear(e.left, depth + 1), linear(e.right, depth + 1)
        if a is None or b is None:
            return None
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
    return None


def slice_width(sl: ast.Slice):
    """The monomials of ``upper - lower`` of ``sl`` (no step, both bounds given), or None."""
    if not isinstance(sl, ast.Slice) or sl.step is not None or sl.lower is None or sl.upper is None:
        return None
    lo, up = linear(sl.lower), linear(sl.upper)
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
            if isinstance(n, (ast.Name, ast.Attribute)):
                t = ast.unparse(n)
                if t in names and t not in seen:
                    seen.add(t)
                    out.append(n)
    return out if seen == names else None
