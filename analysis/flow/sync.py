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
