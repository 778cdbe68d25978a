"""Where a run without a default process group cannot be: the facts that say a use of the group
is reached only where one exists, for ``lifecycle.group_state_path``'s "absent" question (DDP002).

(``lifecycle.absent_truth``: a value the group's absence fixes; ``unconditional.flag_mode_test``: a
mode flag read from any object; both asked by ``lifecycle.group_state_path`` itself.)

- ``held_by_callers(hub, view, fn, callers)``: every call of ``fn`` (in its module, and through
  ``callers`` in the project's other modules) runs where the group exists or the run is
  distributed (``held_at``): under a test on the group or on the distributed mode, after a use or
  an init of the group on the caller's straight path, in a method of a class another method of
  which needs the group on its straight path, or in a function whose own calls are so (two calls
  up). A function that tests ``dist.is_initialized()`` defensively and then needs the group is no
  bug when no caller runs it without one. ``tested``: only a test at each call counts (what DDP002
  asks for a use made in the function's own body, next to its own test: a slip its author can see,
  unless every caller states the contract by testing the mode itself).
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, parent
from .unconditional import passed_only_distributed
from .lifecycle import GROUP_USES, INIT, group_value, guard_test, lifecycle_of, project_target, straight

def _positive(hub, view, test: ast.AST) -> bool:
    """Only a distributed run passes ``test``: a test on the mode that is not negated and not a
    comparison for equality or less (``world_size == 1``), one conjunct of an ``and`` that is, or a
    test on the group that a run without one fails (``group_value``)."""
    return passed_only_distributed(test, lambda t: guard_test(view.sem, t),
                                   lambda t: group_value(hub, view, t, False) is False)


def _needs_here(hub, view, c, helpers: bool = True) -> bool:
    """The call ``c`` needs the group (a use, an init) or (``helpers``) is a project function whose
    unconditional path does, or that creates the group on every call."""
    qn = view.sem.call_qualname(c) or ""
    if qn in GROUP_USES or qn == INIT:
        return True
    if not helpers or qn.startswith("torch.") or not hasattr(hub, "requires_pg_of"):
        return False
    target = project_target(hub, view, c)
    return target is not None and (hub.requires_pg_of(*target) is not None or lifecycle_of(hub, *target)[0] == "must")


def held_at(hub, view, call: ast.Call, callers=None, depth: int = 0, chain=(), tested: bool = False) -> bool:
    """The call ``call`` runs only where the group exists or the run is distributed (see the
    module's docstring); ``chain``: the functions judged on the way (their own uses say nothing);
    ``tested``: only a test at the call (or up the chain of calls) counts."""
    sem = view.sem
    scope = sem.enclosing_function(call) or sem.tree
    child, p = call, parent(call)
    while p is not None and p is not scope:
        if p.__class__ in (ast.If, ast.IfExp) and child is not p.test:
            in_body = child in p.body if p.__class__ is ast.If else child is p.body
            if in_body and _positive(hub, view, p.test):
                return True
        child, p = p, parent(p)
    at = (call.lineno, call.col_offset)
    for c in () if tested else sem.scope_calls(scope) or ():
        if (c.lineno, c.col_offset) >= at:
            break
        if straight(c, scope) and _needs_here(hub, view, c):
            return True  # the caller has needed the group on every call that gets here
    if not isinstance(scope, FUNC_TYPES):
        return False
    cls = parent(scope)
    if isinstance(cls, ast.ClassDef) and not tested:
        for m in cls.body:
            if isinstance(m, FUNC_TYPES) and m is not scope and m not in chain and any(
                    straight(c, m) and _needs_here(hub, view, c, helpers=False) for c in sem.scope_calls(m) or ()):
                return True  # the class is written for a process that holds the group (its own calls)
    return depth < 2 and held_by_callers(hub, view, scope, callers, depth + 1, chain, tested)


def held_by_callers(hub, view, fn, callers=None, depth: int = 0, chain=(), tested: bool = False) -> bool:
    """``fn`` has calls (in its module; through ``callers(view, fn)``, ``(view, call)`` pairs, in
    the project's other modules), and every one of them is ``held_at`` (a call that a test makes
    fail on purpose, ``pytest.raises``, is left out)."""
    from .testing import expects_error

    if not isinstance(fn, FUNC_TYPES) or not hasattr(hub, "call_sites"):
        return False
    memo = view.memo.setdefault("group_absence.held", {})
    key = (id(fn), depth, tested, *map(id, chain))
    if key in memo:
        return memo[key]
    memo[key] = False  # recursion guard
    sites = [(view, c) for c in hub.call_sites(view, fn)]
    if callers is not None:
        sites += [s for s in callers(view, fn) if s not in sites]
    sites = [(v, c) for v, c in sites if not expects_error(c)]
    chain = (*chain, fn)
    got = bool(sites) and all(held_at(hub, v, c, callers, depth, chain, tested) for v, c in sites)
    memo[key] = got
    return got
