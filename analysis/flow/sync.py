"""Is there a synchronising point between two places of a function: a collective every rank
makes (explicit, implicit such as DDP's gradient all-reduce, hidden such as ``dcp.save``, or in a
project function that may make one: ``summaries``), between two source positions of one scope.

A call this analysis cannot follow whose name says it waits for the other ranks
(``accelerator.wait_for_everyone()``, ``comm.synchronize()``, ``hvd.join()``,
``xm.rendezvous(...)``) counts as one too: the name can only silence a finding, never make one.
"""
from __future__ import annotations

import ast

from ..semantic import terminal_name

_WAITS = frozenset({"barrier", "monitored_barrier", "synchronize", "wait_for_everyone", "rendezvous", "join",
                    "sync", "all_reduce", "broadcast", "all_gather", "allreduce", "broadcast_object",
                    "broadcast_object_list", "all_gather_object"})


# context managers that hold the other ranks (of the node) at their entry until the main rank has
# run their body: composer's ``run_local_rank_zero_first()`` (a barrier on each side) and
# ``local_rank_zero_download_and_wait(path)`` (the others poll until ``path`` exists)
MAIN_FIRST_CONTEXTS = frozenset({"composer.utils.dist.run_local_rank_zero_first",
                                 "composer.utils.dist.local_rank_zero_download_and_wait"})


def main_first_with(sem, node: ast.AST, stop: ast.AST):
    """The ``with`` of a ``MAIN_FIRST_CONTEXTS`` context manager around ``node`` (inside ``stop``):
    when its block ends, every rank has waited for what the main rank did in it; None when none."""
    from ..semantic import parent

    p = parent(node)
    while p is not None and p is not stop:
        if isinstance(p, (ast.With, ast.AsyncWith)) and any(
                isinstance(it.context_expr, ast.Call) and sem.call_qualname(it.context_expr) in MAIN_FIRST_CONTEXTS
                for it in p.items):
            return p
        p = parent(p)
    return None


def _pos(node) -> tuple[int, int]:
    return node.lineno, node.col_offset


def _end(node) -> tuple[int, int]:
    return node.end_lineno, node.end_col_offset


def sync_points(hub, view, scope) -> list[ast.Call]:
    """The calls of ``scope`` that may synchronise the ranks, in source order (memoised)."""
    memo = view.memo.setdefault("sync.points", {})
    got = memo.get(id(scope))
    if got is not None:
        return got
    nodes = {id(s.node): s.node for s in hub.sites(view, scope)}
    for c, target in hub.helper_calls(view, scope):
        if hub.summary(*target).collectives:
            nodes[id(c)] = c
    for c in view.sem.scope_calls(scope):
        if id(c) not in nodes and terminal_name(c.func) in _WAITS:
            nodes[id(c)] = c
    got = memo[id(scope)] = sorted(nodes.values(), key=_pos)
    return got


def synchronised_between(hub, view, scope, after: ast.AST, before: ast.AST) -> ast.Call | None:
    """A synchronising call of ``scope`` that starts after ``after`` ends and before ``before``
    starts, or None."""
    lo, hi = _end(after), _pos(before)
    for c in sync_points(hub, view, scope):
        if lo <= _pos(c) and _end(c) <= hi:
            return c
    return None


def collective_points(hub, view, scope) -> list[ast.Call]:
    """The calls of ``scope`` that make a collective (explicit, implicit, hidden, or in a project
    function whose summary has one), by value flow alone: no name of ``_WAITS`` counts, so the
    answer may decide that code runs on every rank."""
    memo = view.memo.setdefault("sync.collectives", {})
    got = memo.get(id(scope))
    if got is not None:
        return got
    nodes = {id(s.node): s.node for s in hub.sites(view, scope)}
    for c, target in hub.helper_calls(view, scope):
        if hub.summary(*target).collectives:
            nodes[id(c)] = c
    got = memo[id(scope)] = sorted(nodes.values(), key=_pos)
    return got


def main_rank_first(ctx, hub, node: ast.AST) -> ast.If | None:
    """The ``if`` that makes the other ranks wait before ``node`` until the main rank has passed it:
    an earlier ``if <not the main rank>: <synchronising call>`` in a block around ``node`` in its
    function (the barrier sandwich of ``torch_distributed_zero_first``: the main rank runs on, does
    the work, then reaches its own barrier and releases the others). None when there is none."""
    from ..semantic import parent
    from .rank_tests import polarity

    sem = ctx.sem
    scope = sem.enclosing_function(node) or sem.tree
    view = hub.main
    points = sync_points(hub, view, scope)
    if not points:
        return None
    child, p = node, parent(node)
    while p is not None:
        for field in ("body", "orelse", "finalbody"):
            block = getattr(p, field, None)
            if not isinstance(block, list) or child not in block:
                continue
            for s in block:
                if s is child:
                    break
                if isinstance(s, ast.If) and polarity(ctx, s.test, scope) is False and any(
                        (s.body[0].lineno, s.body[0].col_offset) <= _pos(c) and _end(c) <= _end(s.body[-1])
                        for c in points):
                    return s
        if p is scope:
            break
        child, p = p, parent(p)
    return None
