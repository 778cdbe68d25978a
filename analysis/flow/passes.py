"""Passes over an iterable: the values that one round of a loop starts a new iteration of
(``for batch in loader``, ``enumerate(loader)``, ``iter(loader)``, ``tqdm(loader)``), in the loop's
body or in the project functions it calls (up to ``MAX_CALLS`` calls deep, in this module or
another, methods through ``self.m()``), with a callee's parameter rewritten as the argument of the
call that reaches it. A pass inside a nested loop's body belongs to that nested loop, not to this
one (the batch loop is not the epoch loop).

DDP301 asks which DataLoaders an epoch loop walks again on each round, wherever the batch loop
lives: ``for epoch in ...: train(epoch)`` where ``train`` iterates a module-level loader, or
``run_one_epoch(data_loader=train_loader)``. What a pass's value *is* (a DataLoader over which
sampler) is ``origins``'s answer, not this module's.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, terminal_name
from .bindings import reaching
from .calls import call_args

MAX_CALLS = 3
MAX_PASSES = 32
_LOOP_TYPES = (ast.For, ast.AsyncFor, ast.While)
_NESTED_SCOPES = (*FUNC_TYPES, ast.Lambda, ast.ClassDef)
# calls that iterate (or hand on for iteration) their positional arguments
_ITERATING = frozenset({"enumerate", "iter", "zip", "tqdm", "islice", "chain", "list", "tuple", "trange"})


class Pass:
    """One new iteration of ``expr`` (a name or ``self.attr`` in ``view``, evaluated at ``at``);
    ``chain`` holds the module views of the loop and of every function on the way to it."""
    __slots__ = ("view", "expr", "at", "chain")

    def __init__(self, view, expr, at, chain):
        self.view, self.expr, self.at, self.chain = view, expr, at, chain


def loop_passes(hub, view, loop) -> list[Pass]:
    """The passes one round of ``loop`` (a For/AsyncFor/While of ``view``) makes, excluding what its
    own header iterates."""
    memo = view.memo.setdefault("passes.loop", {})
    got = memo.get(id(loop))
    if got is None:
        got = memo[id(loop)] = _scan(hub, view, loop.body + getattr(loop, "orelse", []), 0, (view,),
                                     frozenset())
    return got


def iterated_leaves(it: ast.AST) -> list[ast.AST]:
    """The names / ``self`` attributes an iteration header walks: ``loader``,
    ``enumerate(loader)``, ``zip(a, b)``, ``tqdm(loader, ...)``."""
    out: list[ast.AST] = []
    stack = [it]
    while stack:
        e = stack.pop()
        if isinstance(e, ast.Name):
            out.append(e)
        elif isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
            out.append(e)
        elif isinstance(e, ast.Call) and terminal_name(e.func) in _ITERATING:
            stack.extend(a for a in e.args if not isinstance(a, ast.Starred))
    return out


def _nodes(stmts):
    """Nodes of ``stmts`` without nested scopes and without nested loops' bodies (their headers
    stay: ``for batch in loader`` is a pass of the enclosing round)."""
    stack = list(reversed(stmts))
    while stack:
        n = stack.pop()
        yield n
        if isinstance(n, _NESTED_SCOPES):
            continue
        if isinstance(n, _LOOP_TYPES):
            stack.append(n.iter if isinstance(n, (ast.For, ast.AsyncFor)) else n.test)
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(n))))


def _scan(hub, view, stmts, depth: int, chain: tuple, active: frozenset) -> list[Pass]:
    out: list[Pass] = []
    for n in _nodes(stmts):
        if len(out) >= MAX_PASSES:
            break
        if isinstance(n, (ast.For, ast.AsyncFor)):
            out.extend(Pass(view, e, n, chain) for e in iterated_leaves(n.iter))
        elif isinstance(n, ast.comprehension):
            out.extend(Pass(view, e, n.iter, chain) for e in iterated_leaves(n.iter))
        elif isinstance(n, ast.Call):
            if terminal_name(n.func) == "iter" and isinstance(n.func, ast.Name):
                out.extend(Pass(view, e, n, chain) for e in iterated_leaves(n))
                continue
            if depth >= MAX_CALLS:
                continue
            try:
                got = hub.resolve_call(view, n)
            except Exception:  # noqa: BLE001 - an unresolvable call is simply not followed
                got = None
            if got is None or not isinstance(got[1], FUNC_TYPES) or got[1].name == "__init__" \
                    or id(got[1]) in active:
                continue
            tv, fn = got
            inner = _scan(hub, tv, fn.body, depth + 1, (*chain, tv), active | {id(fn)})
            bound = dict(call_args(n, fn))
            for p in inner:
                if isinstance(p.expr, ast.Name) and p.view is tv:
                    kind, where = reaching(tv, p.expr.id, p.at)
                    if kind == "param" and where is fn:
                        arg = bound.get(p.expr.id)
                        if arg is not None:  # the caller's argument, in the caller's terms
                            out.extend(Pass(view, e, n, p.chain) for e in iterated_leaves(arg))
                        continue
                out.append(p)
    return out
