"""Control dependence on the AST: which collective sites run on only some ranks, and why.

A site is *divergent* when
- ``cond``: a rank-varying ``if``/``while`` test (or conditional expression) decides whether it
  runs, and the other branch does not make the same collective;
- ``exit``: an early exit (``return``, ``break``, ``continue``, ``sys.exit()``/``os._exit()`` with a
  success status) under a rank-varying condition skips it: later in the same block, or, for
  ``break``/``return`` inside a loop, in the loop's later iterations;
- ``loop``: it sits in a loop whose trip count is rank-varying (a per-rank shard, a loader over a
  per-rank dataset without a DistributedSampler, a ``while`` on a rank-varying test).

Not divergent: under DDP's ``join()`` context (``with model.join():`` / ``with Join([...]):``),
which shadows the collectives of ranks that ran out of inputs; conditions on values a collective
made uniform (see ``bindings``); ``raise`` and failing exits (``sys.exit(1)``), which stop the job
(the launcher tears the other ranks down) rather than leave them waiting.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, parent
from .bindings import LOOPS
from .summaries import dist_mode_test

_EXIT_QNS = frozenset({"sys.exit", "os._exit"})
_SCOPES = (*FUNC_TYPES, ast.Lambda, ast.ClassDef, ast.Module)


class Divergence:
    __slots__ = ("kind", "site", "node", "value", "exit")

    def __init__(self, kind, site, node, value, exit=None):
        # node: the If/While (cond), the loop (loop), the If around the exit (exit)
        self.kind, self.site, self.node, self.value, self.exit = kind, site, node, value, exit


def _contains(outer: ast.AST, inner: ast.AST) -> bool:
    return (outer.lineno, outer.col_offset) <= (inner.lineno, inner.col_offset) and (
        inner.end_lineno, inner.end_col_offset) <= (outer.end_lineno, outer.end_col_offset)


def under_join(view, node: ast.AST) -> bool:
    p = parent(node)
    while p is not None and not isinstance(p, _SCOPES):
        if isinstance(p, (ast.With, ast.AsyncWith)):
            for it in p.items:
                e = it.context_expr
                if isinstance(e, ast.Call):
                    f = e.func
                    name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
                    if name in ("join", "Join") or (view.sem.call_qualname(e) or "").endswith(".Join"):
                        return True
        p = parent(p)
    return False


def clean_exit_call(view, st: ast.AST) -> bool:
    """``sys.exit()``, ``sys.exit(0)``, ``os._exit(0)``, ``exit()``, ``quit()``: the rank leaves
    with success, and the others wait for it."""
    if not (isinstance(st, ast.Expr) and isinstance(st.value, ast.Call)):
        return False
    c = st.value
    qn = view.sem.call_qualname(c)
    if qn not in _EXIT_QNS and not (qn is None and isinstance(c.func, ast.Name) and c.func.id in ("exit", "quit")):
        return False
    if not c.args:
        return qn != "os._exit"
    a = c.args[0]
    return isinstance(a, ast.Constant) and (a.value == 0 or a.value is None) and a.value is not False


def _exits(view, stmt: ast.stmt) -> list[ast.stmt]:
    """Early exits inside ``stmt`` (not in nested functions or classes), cached."""
    memo = view.memo.setdefault("exits", {})
    got = memo.get(id(stmt))
    if got is None:
        got = []
        stack = [stmt]
        while stack:
            n = stack.pop()
            t = n.__class__
            if t in (ast.Return, ast.Break, ast.Continue) or (t is ast.Expr and clean_exit_call(view, n)):
                got.append(n)
                continue
            if isinstance(n, (*FUNC_TYPES, ast.ClassDef)):
                continue  # a definition's exits leave the definition, not this block
            for f in ("body", "orelse", "finalbody", "handlers", "cases"):
                v = getattr(n, f, None)
                if isinstance(v, list):
                    stack.extend(v)
        memo[id(stmt)] = got
    return got


def _exit_condition(hub, view, ex: ast.stmt, top: ast.stmt, site_node: ast.AST):
    """(If node, value) of the innermost rank-varying test that decides whether ``ex`` runs, up
    to ``top``; None when none does or the exit does not leave a region holding the site."""
    t = ex.__class__
    # break/continue must belong to a loop that holds the site
    n = parent(ex)
    if t in (ast.Break, ast.Continue):
        while n is not None:
            if isinstance(n, LOOPS):
                if not _contains(n, site_node):
                    return None
                break
            n = parent(n)
    ev = hub.evaluator(view)
    child = ex
    p = parent(ex)
    while p is not None:
        if isinstance(p, ast.ExceptHandler):
            return None  # an exception on this rank: not a value we can judge
        if isinstance(p, (ast.If, ast.While)) and child is not p.test:
            v = ev.value(p.test)
            if v.varying:
                return p, v
        if p is top or isinstance(p, _SCOPES):
            break
        child = p
        p = parent(p)
    return None


def divergences(hub, view, scope: ast.AST) -> list[Divergence]:
    memo = view.memo.setdefault("divergences", {})
    got = memo.get(id(scope))
    if got is not None:
        return got
    out: list[Divergence] = []
    sites = hub.sites(view, scope)
    ev = hub.evaluator(view)
    for site in sites:
        if under_join(view, site.node):
            continue
        d = _site_divergence(hub, view, scope, site, sites, ev)
        if d is not None:
            out.append(d)
    memo[id(scope)] = out
    return out


def _mirrored(sites, site, region: ast.AST | list) -> bool:
    """Every collective of ``site`` is also made by sites in ``region`` (a statement list: the
    other branch), or outside ``region`` (a node: elsewhere in the function, the staggered
    ``if rank != 0: barrier()`` ... ``if rank == 0: barrier()`` pattern)."""
    need = {e.what for e in site.effects}
    have = set()
    for s in sites:
        if s is site:
            continue
        if isinstance(region, list):
            inside = any(_contains(st, s.node) for st in region)
        else:
            inside = not _contains(region, s.node)
        if inside:
            have.update(e.what for e in s.effects)
    return need <= have


def _exit_mirrors(sites, site, if_node: ast.AST, ex: ast.stmt) -> bool:
    """The exiting branch makes the skipped collective itself before it leaves (``if rank not in
    members: dist.barrier(); return`` ... ``dist.barrier()``)."""
    blk = if_node.body if any(_contains(st, ex) for st in if_node.body) else if_node.orelse
    before = [st for st in blk if (st.lineno, st.col_offset) < (ex.lineno, ex.col_offset)]
    return _mirrored(sites, site, before)


def _site_divergence(hub, view, scope, site, sites, ev):
    child = site.node
    p = parent(child)
    conditioned = False
    while p is not None:
        if isinstance(p, ast.If) and child is not p.test:
            v = ev.value(p.test)
            if v.varying and not conditioned:
                other = p.orelse if child in p.body else p.body
                if not _mirrored(sites, site, other) and not _mirrored(sites, site, p):
                    return Divergence("cond", site, p, v)
            if not dist_mode_test(p.test):
                conditioned = True  # an outer condition may be correlated with this one
        elif isinstance(p, ast.IfExp) and child is not p.test:
            v = ev.value(p.test)
            if v.varying and not conditioned:
                return Divergence("cond", site, p, v)
            conditioned = True
        elif isinstance(p, ast.While) and child is not p.test:
            v = ev.value(p.test)
            if v.varying and child in p.body:
                return Divergence("loop", site, p, v)
        elif isinstance(p, (ast.For, ast.AsyncFor)) and child is not p.iter and child in p.body:
            v = ev.trip_count(p.iter)
            if v.varying:
                return Divergence("loop", site, p, v)
        # early exits in the same block before the site, or (in a loop) anywhere in its body
        if isinstance(child, ast.stmt):
            for f in ("body", "orelse", "finalbody"):
                blk = getattr(p, f, None)
                if isinstance(blk, list) and child in blk:
                    i = blk.index(child)
                    later = blk[i + 1:] if (f == "body" and isinstance(p, LOOPS)) else []
                    for st in (*blk[:i], *later):
                        for ex in _exits(view, st):
                            if st in later and ex.__class__ is ast.Continue:
                                continue
                            if conditioned:
                                continue  # the site's own condition may be correlated with the exit's
                            got = _exit_condition(hub, view, ex, st, site.node)
                            if got is not None and not _exit_mirrors(sites, site, got[0], ex):
                                return Divergence("exit", site, got[0], got[1], ex)
                    break
        if p is scope or isinstance(p, _SCOPES):
            break
        child = p
        p = parent(p)
    return None
