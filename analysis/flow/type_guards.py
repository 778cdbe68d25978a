"""Types the code insists a value has: ``assert isinstance(x, T)``, and ``if not isinstance(x, T):
raise ...`` or ``warnings.warn(...)`` (also as one conjunct of an ``and``: ``if distributed and not isinstance(...)``, which
requires ``T`` in that mode). Values are keyed by their dotted spelling (``self.loader.sampler``),
those rooted at ``self`` per class. A framework that refuses a DataLoader without a
``DistributedSampler`` in distributed runs tells DDP301 what the sampler is there, though the user
builds the loader.
"""
from __future__ import annotations

import ast

from ..semantic import parent


def spelling(expr) -> str | None:
    """``a.b.c`` for a chain of attributes on a name, else None."""
    parts = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return None
    parts.append(expr.id)
    return ".".join(reversed(parts))


def _class_of(sem, node):
    fn = sem.enclosing_function(node)
    while fn is not None:
        p = parent(fn)
        if isinstance(p, ast.ClassDef):
            return p
        fn = sem.enclosing_function(fn)
    return None


def _objects(sem, body) -> bool:
    """The branch refuses: it ends in ``raise``, or it warns (``warnings.warn``) that the value is
    not what the code expects."""
    if isinstance(body[-1], ast.Raise):
        return True
    return any(isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)
               and sem.call_qualname(s.value) == "warnings.warn" for s in body)


def required_types(view) -> dict:
    """{(id of the class or None, spelling): {qualified type names}} for the module of ``view``."""
    memo = view.memo.get("type_guards")
    if memo is not None:
        return memo
    out: dict = {}
    sem = view.sem
    for n in view.sem.walk_order():
        tests = []
        if isinstance(n, ast.Assert):
            tests = [n.test]
        elif isinstance(n, ast.If) and n.body and _objects(sem, n.body):
            conj = n.test.values if isinstance(n.test, ast.BoolOp) and isinstance(n.test.op, ast.And) else [n.test]
            tests = [c.operand for c in conj if isinstance(c, ast.UnaryOp) and isinstance(c.op, ast.Not)]
        for t in tests:
            if not (isinstance(t, ast.Call) and isinstance(t.func, ast.Name) and t.func.id == "isinstance"
                    and len(t.args) == 2 and not t.keywords):
                continue
            key = spelling(t.args[0])
            qn = sem.qualname(t.args[1]) if isinstance(t.args[1], (ast.Name, ast.Attribute)) else None
            if key is None or not qn:
                continue
            cls = _class_of(sem, n) if key.startswith("self.") else None
            out.setdefault((id(cls) if cls is not None else None, key), set()).add(qn)
    view.memo["type_guards"] = out
    return out


def requires(view, expr, qns, attr: str | None = None) -> bool:
    """The module of ``view`` insists (assert, or raise otherwise) that ``expr`` (where it stands),
    or its attribute ``attr``, is an instance of one of ``qns``."""
    key = spelling(expr)
    if key is None:
        return False
    if attr:
        key = f"{key}.{attr}"
    cls = _class_of(view.sem, expr) if key.startswith("self.") else None
    got = required_types(view).get((id(cls) if cls is not None else None, key), ())
    return any(q in qns for q in got)
