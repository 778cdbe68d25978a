"""Exclusive runs: two nodes of which one run of the program executes at most one.

``exclusive``: the two branches of one ``if`` (or conditional expression) of a scope, with no loop
between that ``if`` and the scope that could run both. ``exclusive_runs``: the same, also through
the calls that lead to each node: a function whose one call in its module is the only way in
(``if cfg.fsdp: self._setup_fsdp() else: self._setup_ddp()``: what the two methods do never
happens in one run).

``never_follows``: no run of a scope goes on from one node to a later one: they are exclusive, or
the first one's way on ends in a ``return`` / ``raise`` before the second (``if mode == "merge":
write(...); return`` and then ``os.makedirs(out)``).
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, parent

_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_MAX_UP = 4


def exclusive(a: ast.AST, b: ast.AST, scope: ast.AST) -> bool:
    """``a`` and ``b`` sit in the two branches of one ``if`` (or conditional expression) of
    ``scope``, with no loop between that ``if`` and ``scope`` that could run both."""
    chain_a = _chain(a, scope)
    chain_b = _chain(b, scope)
    if chain_a is None or chain_b is None:
        return False
    ids_b = {id(p): child for p, child in chain_b}
    for p, child_a in chain_a:
        child_b = ids_b.get(id(p))
        if child_b is None:
            continue
        # ``p`` is the lowest common ancestor
        if isinstance(p, ast.If):
            sides = (child_a in p.body, child_b in p.body)
            if child_a is p.test or child_b is p.test or sides[0] == sides[1]:
                return False
        elif isinstance(p, ast.IfExp):
            if child_a is p.test or child_b is p.test or child_a is child_b:
                return False
        else:
            return False
        up = p
        while up is not None and up is not scope:
            if isinstance(up, _LOOPS) or isinstance(up, (*FUNC_TYPES, ast.Lambda)):
                return False
            up = parent(up)
        return True
    return False


def never_follows(a: ast.AST, b: ast.AST, scope: ast.AST) -> bool:
    """No run of ``scope`` reaches ``b`` after ``a``: ``exclusive``, or every way on from ``a``
    leaves the scope first: a block holding ``a`` (below the lowest statement block shared with
    ``b``) has an unconditional ``return`` / ``raise`` after it, or the shared block has one between
    the two. A ``raise`` inside a ``try`` with handlers, and a ``return`` whose ``finally`` holds
    ``b``, do not cut the way."""
    if exclusive(a, b, scope):
        return True
    chain_a = _chain(a, scope)
    chain_b = _chain(b, scope)
    if chain_a is None or chain_b is None:
        return False
    on_b = {id(p): child for p, child in chain_b}
    upto = next((k for k, (p, _c) in enumerate(chain_a) if id(p) in on_b), None)
    if upto is None:
        return False
    below = chain_a[:upto + 1]
    handled = any(isinstance(p, ast.Try) and p.handlers and any(c is st for st in p.body) for p, c in below)
    finally_b = any(isinstance(p, ast.Try) and id(p) in on_b and any(on_b[id(p)] is st for st in p.finalbody)
                    for p, _c in chain_a)
    for p, child in below:
        if isinstance(p, (*FUNC_TYPES, ast.Lambda)) and p is not scope:
            return False
        for block in _stmt_blocks(p):
            i = next((k for k, st in enumerate(block) if st is child), None)
            if i is None:
                continue
            end = len(block)
            if id(p) in on_b:  # the shared block: only what lies between the two
                j = next((k for k, st in enumerate(block) if st is on_b[id(p)]), None)
                if j is None or j <= i:
                    return False
                end = j
            for st in block[i + 1:end]:
                if (isinstance(st, ast.Return) and not finally_b) or (isinstance(st, ast.Raise) and not handled):
                    return True
    return False


def _stmt_blocks(p: ast.AST) -> list:
    return [getattr(p, f) for f in ("body", "orelse", "finalbody") if isinstance(getattr(p, f, None), list)] + \
        [h.body for h in getattr(p, "handlers", ())]


def _chain(node: ast.AST, scope: ast.AST):
    """(ancestor, its child on the way to ``node``) from ``node`` up to ``scope``, innermost first."""
    out = []
    child, p = node, parent(node)
    while p is not None:
        out.append((p, child))
        if p is scope:
            return out
        child, p = p, parent(p)
    return None


def exclusive_runs(hub, view, a: ast.AST, b: ast.AST) -> bool:
    """``a`` and ``b`` (of the module ``view``) never both run in one call of the outermost function
    they share: ``exclusive`` in some function that reaches both, each through the one call of each
    function on the way in (``hub.call_sites``; up to four callers)."""
    ups_b = _ups(hub, view, b)
    if not ups_b:
        return False
    by_scope = {id(s): n for s, n in ups_b}
    for s, n in _ups(hub, view, a):
        other = by_scope.get(id(s))
        if other is not None:
            return other is not n and exclusive(n, other, s)
    return False


def _ups(hub, view, node: ast.AST) -> list:
    """(scope, the node or the call that leads to it in that scope), from ``node``'s own function
    up through each function's one call site in the module; the module last when reached."""
    out = []
    sem = view.sem
    for _ in range(_MAX_UP):
        fn = sem.enclosing_function(node)
        if fn is None:
            out.append((view.tree, node))
            return out
        out.append((fn, node))
        sites = [c for c in hub.call_sites(view, fn) if not (fn.lineno <= c.lineno <= fn.end_lineno)]
        if len(sites) != 1:
            return out
        node = sites[0]
    return out


def contradictory(a: ast.AST, b: ast.AST, scope: ast.AST) -> bool:
    """``a`` runs only where a test holds and ``b`` only where it does not, in two ``if`` statements
    of ``scope`` that test the same flag: a name or an attribute chain that nothing in ``scope``
    assigns (a parameter, a configuration field read as it is): ``if cfg.eval_only: model =
    DDP(...)`` and, later, ``if not cfg.eval_only: <the training loop>``."""
    ca = _flags(a, scope)
    if not ca:
        return False
    for key, vb in _flags(b, scope).items():
        va = ca.get(key)
        if va is not None and va != vb and not _stored(scope, key, min(a.lineno, b.lineno)):
            return True
    return False


def _flags(node: ast.AST, scope: ast.AST) -> dict:
    """{flag: the truth it has wherever ``node`` runs} of the ``if`` statements around ``node`` in
    ``scope`` (``not`` read through; each conjunct of an ``and`` on the body side)."""
    out: dict[str, bool] = {}
    child, p = node, parent(node)
    while p is not None and p is not scope:
        if isinstance(p, ast.If) and child is not p.test:
            side = any(s is child for s in p.body)
            tests = p.test.values if side and isinstance(p.test, ast.BoolOp) and isinstance(p.test.op, ast.And) \
                else [p.test]
            for t in tests:
                neg = False
                while isinstance(t, ast.UnaryOp) and isinstance(t.op, ast.Not):
                    t, neg = t.operand, not neg
                key = _dotted(t)
                if key is not None:
                    out.setdefault(key, side != neg)
        child, p = p, parent(p)
    return out


def _dotted(e: ast.AST) -> str | None:
    parts = []
    while isinstance(e, ast.Attribute):
        parts.append(e.attr)
        e = e.value
    if not isinstance(e, ast.Name):
        return None
    parts.append(e.id)
    return ".".join(reversed(parts))


def _stored(scope: ast.AST, key: str, before: int) -> bool:
    """Something in ``scope`` binds ``key``, or binds the name a chain starts from more than once or
    on line ``before`` or later (``configs = load(path)`` once at the top is the one flag read twice)."""
    base = key.split(".", 1)[0]
    bases = []
    for n in ast.walk(scope):
        if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor, ast.With,
                          ast.NamedExpr)):
            targets = n.targets if isinstance(n, ast.Assign) else [i.optional_vars for i in n.items] \
                if isinstance(n, ast.With) else [n.target]
            for t in targets:
                for x in ast.walk(t) if t is not None else ():
                    d = _dotted(x) if isinstance(x, (ast.Name, ast.Attribute)) else None
                    if d is None or not isinstance(getattr(x, "ctx", None), ast.Store):
                        continue
                    if d == key and key != base:
                        return True
                    if d == base:
                        bases.append(n)
        elif isinstance(n, (ast.Global, ast.Nonlocal)) and base in n.names:
            return True
    return len(bases) > 1 or any(b.lineno >= before or isinstance(b, (ast.For, ast.AsyncFor)) for b in bases)
