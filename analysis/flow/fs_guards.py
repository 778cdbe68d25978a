"""The ``if`` tests around a filesystem effect in its function (``effect_guards``), and what a call's
arguments make of them (``refuted``: a literal that fails the test; ``main_only_by_args``: a flag
parameter given a main-rank test): ``fs_effects.call_site_effects`` drops those effects at the call.
"""
from __future__ import annotations

import ast

from ..semantic import parent
from ..torch_api import constant_of


def effect_guards(node, fn) -> tuple:
    """(test, holds) for each ``if`` of ``fn`` around ``node`` (``holds``: False in its ``else``)."""
    out = []
    child, p = node, parent(node)
    while p is not None and p is not fn:
        if isinstance(p, ast.If) and child is not p.test:
            out.append((p.test, child in p.body))
        child, p = p, parent(p)
    return tuple(out)


def refuted(sem, guards, args) -> bool:
    """A guard on a parameter that this call gives a literal (``if dataset == "coco":`` at
    ``create_dataset("pretrain", ...)``) does not hold: the effect does not run at this call."""
    for test, holds in guards:
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Name)):
            continue
        a = args.get(test.left.id)
        c = constant_of(sem, a) if a is not None else None
        if c is None:
            continue
        op, right = test.ops[0], test.comparators[0]
        if isinstance(right, ast.Constant):
            vals = [right.value]
        elif isinstance(right, (ast.Tuple, ast.List, ast.Set)) and all(isinstance(x, ast.Constant) for x in right.elts):
            vals = [x.value for x in right.elts]
        else:
            continue
        if isinstance(op, (ast.Eq, ast.In)):
            got = c.value in vals
        elif isinstance(op, (ast.NotEq, ast.NotIn)):
            got = c.value not in vals
        else:
            continue
        if isinstance(op, (ast.Eq, ast.NotEq)) and len(vals) != 1:
            continue
        if got != holds:
            return True
    return False


def main_only_by_args(vctx, guards, args, call) -> bool:
    """A guard on a flag parameter (``if enabled:``) that this call gives a main-rank test
    (``enabled=is_master(rank)``, ``rank == 0``): the effect runs on the main rank only."""
    from .rank_tests import polarity

    for test, holds in guards:
        neg = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
        t = test.operand if neg else test
        a = args.get(t.id) if isinstance(t, ast.Name) else None
        pol = polarity(vctx, a, vctx.sem.scope_of(call)) if a is not None else None
        if pol is not None and (pol != neg) == holds:
            return True
    return False
