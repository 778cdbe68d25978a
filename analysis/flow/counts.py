"""Counts: how many items a list literal, a repetition or a comprehension has, as a linear form in
the number of processes: ``a * W + b`` where ``W`` is the world size, ``a * N + b`` where ``N`` is
the GPUs of one node (``torch.cuda.device_count()``, ``LOCAL_WORLD_SIZE``), or a plain constant.

The integers are followed through the program model (``origins``): names and their reaching
bindings, tuple unpacking, ``self`` attributes set in another method, a function's parameters (its
calls in the project) and the returns of project functions. So ``[None] * (self.world_size + 1)``
with ``self.world_size = dist.get_world_size()`` in ``__init__``, or ``[None for _ in range(n)]``
with every caller passing ``torch.cuda.device_count()``, are counted like the literal forms. A
name only counts through its value: ``world_size`` bound to something unknown is unknown.

``count_of(an, view, e, at)`` answers for an integer expression, ``length_of`` for a sequence
expression; both give a ``Count`` or None (not provable). Every origin of a name must give the same
count, or the answer is None.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

from ..semantic import parent
from ..torch_api import D
from .origins import origins
from .vocab import env_key

MAX_DEPTH = 5
_WORLD_ENV = frozenset({"WORLD_SIZE"})
_NODE_ENV = frozenset({"LOCAL_WORLD_SIZE"})


@dataclass(frozen=True)
class Count:
    unit: str  # "" (a constant), "W" (the world size) or "N" (the GPUs of one node)
    a: int
    b: int

    @property
    def constant(self) -> int | None:
        return self.b if not self.unit or self.a == 0 else None

    def describe(self) -> str:
        if self.constant is not None:
            return str(self.constant)
        unit = "the world size" if self.unit == "W" else "the GPUs of one node"
        s = unit if self.a == 1 else f"{self.a} x {unit}"
        if self.b:
            s += f" {'+' if self.b > 0 else '-'} {abs(self.b)}"
        return s


def _const(k: int) -> Count:
    return Count("", 0, k)


def _add(x: Count, y: Count, sign: int = 1) -> Count | None:
    if x.unit and y.unit and x.unit != y.unit and x.a and y.a:
        return None
    unit = x.unit if x.a else y.unit if y.a else ""
    a = x.a + sign * y.a
    return Count(unit if a else "", a, x.b + sign * y.b)


def _mul(x: Count, y: Count) -> Count | None:
    kx, ky = x.constant, y.constant
    if kx is not None:
        return Count(y.unit if ky is None else "", kx * y.a if ky is None else 0, kx * y.b if ky is None else kx * ky)
    if ky is not None:
        return Count(x.unit, ky * x.a, ky * x.b)
    return None


def _agree(an, got, fn, depth: int) -> Count | None:
    answers = set()
    for v, e in got:
        c = fn(an, v, e, e, depth + 1)
        if c is None:
            return None
        answers.add(c)
    return answers.pop() if len(answers) == 1 else None


def count_of(an, view, e, at, depth: int = 0) -> Count | None:
    """The value of the integer expression ``e`` (at ``at``, in ``view``) as a ``Count``."""
    if e is None or depth > MAX_DEPTH:
        return None
    if isinstance(e, ast.Constant):
        if isinstance(parent(e), (ast.keyword, ast.Dict)):
            return None  # an argparse default or a configuration entry: a setting, not a fact
        return _const(e.value) if isinstance(e.value, int) and not isinstance(e.value, bool) else None
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
        c = count_of(an, view, e.operand, at, depth + 1)
        return None if c is None else Count(c.unit, -c.a, -c.b)
    if isinstance(e, ast.BinOp) and isinstance(e.op, (ast.Add, ast.Sub, ast.Mult)):
        x = count_of(an, view, e.left, at, depth + 1)
        y = count_of(an, view, e.right, at, depth + 1) if x is not None else None
        if y is None:
            return None
        if isinstance(e.op, ast.Mult):
            return _mul(x, y)
        return _add(x, y, -1 if isinstance(e.op, ast.Sub) else 1)
    sem = view.sem
    if isinstance(e, ast.Call):
        qn = sem.call_qualname(e)
        if qn == D + "get_world_size" and not e.args and not e.keywords:
            return Count("W", 1, 0)
        if qn == "torch.cuda.device_count" and not e.args:
            return Count("N", 1, 0)
        if isinstance(e.func, ast.Name) and e.func.id == "int" and len(e.args) == 1 and not e.keywords:
            return count_of(an, view, e.args[0], at, depth + 1)
        if isinstance(e.func, ast.Name) and e.func.id == "len" and len(e.args) == 1 and not e.keywords:
            return length_of(an, view, e.args[0], at, depth + 1)
    key = env_key(view, e)
    if key is not None:
        if isinstance(e, ast.Call) and len(e.args) > 1:
            return None  # a default: the count is unknown where the variable is unset
        return Count("W", 1, 0) if key in _WORLD_ENV else Count("N", 1, 0) if key in _NODE_ENV else None
    if isinstance(e, ast.Name) or isinstance(e, ast.Call) or (
            isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self"):
        got = origins(an, view, e, at)
        if not got or any(x is e for _, x in got):
            return None
        return _agree(an, got, count_of, depth)
    return None


def length_of(an, view, e, at, depth: int = 0) -> Count | None:
    """How many items the sequence expression ``e`` has, as a ``Count``."""
    if e is None or depth > MAX_DEPTH:
        return None
    if isinstance(e, (ast.List, ast.Tuple)):
        return None if any(isinstance(x, ast.Starred) for x in e.elts) else _const(len(e.elts))
    if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Mult):
        for seq, k in ((e.left, e.right), (e.right, e.left)):
            if isinstance(seq, (ast.List, ast.Tuple)):
                base = length_of(an, view, seq, at, depth + 1)
                n = count_of(an, view, k, at, depth + 1) if base is not None else None
                return None if n is None else _mul(base, n)
        return None
    if isinstance(e, ast.ListComp) and len(e.generators) == 1:
        gen = e.generators[0]
        if gen.ifs or gen.is_async:
            return None
        return _iter_count(an, view, gen.iter, at, depth + 1)
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "list" \
            and len(e.args) == 1 and not e.keywords:
        return _iter_count(an, view, e.args[0], at, depth + 1)
    return None


def _iter_count(an, view, it, at, depth: int) -> Count | None:
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" \
            and not it.keywords and 1 <= len(it.args) <= 2:
        if len(it.args) == 1:
            return count_of(an, view, it.args[0], at, depth + 1)
        lo = count_of(an, view, it.args[0], at, depth + 1)
        hi = count_of(an, view, it.args[1], at, depth + 1) if lo is not None else None
        return None if hi is None else _add(hi, lo, -1)
    return length_of(an, view, it, at, depth + 1)
