"""Inits that only the distributed run makes: a project function that creates the default process
group in one branch of a test on the distributed mode (``if world_size > 1:``, a project helper
``is_using_distributed()`` that returns such a test) and on the other branch returns or falls
through without one, and the calls of it after which the group is needed unconditionally.

- ``mode_test_via(hub, view, test)``: ``lifecycle.mode_test``, also through ``not`` / ``and`` /
  ``or``, a name bound once, and a project function whose returns are such tests (or booleans);
- ``skipped_init_exits(hub, view, fn)``: the points (node, the ``if`` whose branch it is) where a
  run taking the single-process side of such a test leaves the test with no group and goes on to
  return normally: the ``return`` of that branch, or the statement after the ``if`` when the
  branch falls through (or the ``if`` itself when nothing follows);
- ``group_needed_after(hub, view, call, uses)``: the first call after ``call``, on the straight path
  of ``call``'s scope, that needs the default group (a qualified name in ``uses``, or a project
  function whose unconditional path needs it), with nothing between that creates the group or
  leaves.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, parent
from .lifecycle import (INIT, LIBRARY_INITS, _ends, _own_nodes, harmless, init_sites, library_init_sites,
                        mode_test, project_target, straight)

_EXIT_QNS = frozenset({"sys.exit", "os._exit", "exit", "quit"})


def mode_test_via(hub, view, test, depth: int = 0) -> bool:
    """``test`` asks whether the job runs distributed at all (not whether the group exists)."""
    if test is None or depth > 3:
        return False
    sem = view.sem
    if harmless(sem, test):
        return False
    if mode_test(sem, test):
        return True
    t = test.__class__
    if t is ast.UnaryOp and isinstance(test.op, ast.Not):
        return mode_test_via(hub, view, test.operand, depth)
    if t is ast.BoolOp:
        return any(mode_test_via(hub, view, v, depth) for v in test.values)
    if t is ast.Name:
        v = sem.single_value(test.id, sem.scope_of(test))
        return v is not None and v is not test and mode_test_via(hub, view, v, depth + 1)
    if t is not ast.Call or hub is None or (sem.call_qualname(test) or "").startswith("torch."):
        return False
    target = project_target(hub, view, test)
    if target is None or not isinstance(target[1], FUNC_TYPES):
        return False
    tview, fn = target
    vals = [n.value for n in _own_nodes(fn) if isinstance(n, ast.Return)]
    if not vals or any(v is None for v in vals):
        return False
    tests = [v for v in vals if not (isinstance(v, ast.Constant) and isinstance(v.value, bool))]
    return bool(tests) and all(mode_test_via(hub, tview, v, depth + 1) for v in tests)


def _inits(hub, view, nodes) -> bool:
    """Some call in ``nodes`` (statements) creates the default group, directly or through project
    functions (any path)."""
    sem = view.sem
    for st in nodes:
        for n in ast.walk(st):
            if n.__class__ is not ast.Call:
                continue
            qn = sem.call_qualname(n) or ""
            if qn == INIT or qn in LIBRARY_INITS:
                return True
            if qn.startswith("torch."):
                continue
            target = project_target(hub, view, n)
            if target is not None and (init_sites(hub, *target) or library_init_sites(hub, *target)):
                return True
    return False


def _chain(st: ast.If):
    """(if, branch body, is_else) of an ``if`` / ``elif`` / ``else`` chain, in order."""
    out = []
    q = st
    while True:
        out.append((q, q.body, False))
        if len(q.orelse) == 1 and q.orelse[0].__class__ is ast.If:
            q = q.orelse[0]
            continue
        out.append((q, q.orelse, True))
        return out


def skipped_init_exits(hub, view, fn) -> list:
    """[(node, if)]: see the module docstring. Only the top-level statements of ``fn`` are followed:
    an ``if`` on the distributed mode before the first statement that may create the group whose
    branch without one returns, and the branches without one of the first such statement when it
    is an ``if`` chain on the distributed mode (the statements after it must create no group)."""
    if not isinstance(fn, FUNC_TYPES):
        return []
    memo = view.memo.setdefault("mode_inits.exits", {})
    if id(fn) in memo:
        return memo[id(fn)]
    memo[id(fn)] = []
    sem = view.sem
    body = fn.body
    first = next((k for k, st in enumerate(body) if _inits(hub, view, [st])), None)
    out = []
    if first is not None:
        for k, st in enumerate(body[: first + 1]):
            if st.__class__ is not ast.If:
                continue
            holds = k == first
            if holds and _inits(hub, view, body[first + 1:]):
                break  # the branch without a group meets a later init
            seen = []
            for q, branch, is_else in _chain(st):
                prior = [x for x in seen if x is not q]
                if not is_else:
                    seen.append(q)
                if not _single_side(view, q, is_else, prior) or _inits(hub, view, branch):
                    continue
                if holds and not any(_inits(hub, view, b) for _q, b, _e in _chain(st)):
                    continue
                if branch and isinstance(branch[-1], ast.Return):
                    out.append((branch[-1], q))
                elif holds and not _ends(sem, branch):
                    out.append((body[first + 1] if first + 1 < len(body) else st, q))
    memo[id(fn)] = out
    return out


def _single_side(view, q, is_else, earlier) -> bool:
    """A single-process run takes this branch of ``q`` (``mode_unbound.single_run_side``): the
    ``else`` of a test it fails, the body of one it passes; it passes no test of the chain before."""
    from .mode_unbound import single_run_side

    side = "orelse" if is_else else "body"
    try:
        if single_run_side(view, q.test, view.sem.scope_of(q)) != side:
            return False
        return all(single_run_side(view, p.test, view.sem.scope_of(p)) != "body" for p in earlier)
    except AttributeError:  # a query that needs more than the module's view: no answer
        return False


def group_needed_after(hub, view, call, uses):
    """(use, what) for the first call after ``call`` on the straight path of its scope that needs
    the group: a call named in ``uses`` (what = its qualified name), or one of a project function
    whose unconditional path does (what = the ``requires_pg_of`` effect); None when a call before
    it may create the group, or the path may leave on the way (a ``return``, an ``if`` on the
    distributed mode with a branch that ends)."""
    sem = view.sem
    scope = sem.scope_of(call)
    if scope is None or not straight(call, scope):
        return None
    top = _top(call, scope)
    block = getattr(parent(top), "body", None)
    if top is None or not isinstance(block, list) or top not in block:
        return None
    at = (call.end_lineno, call.end_col_offset)
    for st in block[block.index(top):]:
        for n in _walk_ordered(st):
            if n.__class__ is ast.Return and st is not top:
                return None
            if n.__class__ is ast.If and mode_test_via(hub, view, n.test) \
                    and (_ends(sem, n.body) or _ends(sem, n.orelse)):
                return None
            if n.__class__ is not ast.Call or (n.lineno, n.col_offset) < at:
                continue
            qn = sem.call_qualname(n) or ""
            if qn == INIT or qn in LIBRARY_INITS or qn in _EXIT_QNS:
                return None
            if qn.startswith("torch.") and qn not in uses:
                continue
            target = None if qn in uses else project_target(hub, view, n)
            if target is not None and (init_sites(hub, *target) or library_init_sites(hub, *target)):
                return None
            if not straight(n, scope):
                continue
            if qn in uses:
                return n, qn
            if target is not None:
                eff = hub.requires_pg_of(*target)
                if eff is not None:
                    return n, eff
    return None


def _top(node, scope):
    """The statement of ``scope``'s own block (through ``with`` blocks) that holds ``node``."""
    child, p = node, parent(node)
    while p is not None and p is not scope:
        child, p = p, parent(p)
    if p is None:
        return None
    return child if isinstance(child, ast.stmt) else None


def _walk_ordered(st):
    """The nodes of ``st`` in source order (nested definitions left out)."""
    out = []
    work = [st]
    while work:
        n = work.pop()
        out.append(n)
        work.extend(c for c in ast.iter_child_nodes(n) if not isinstance(c, (*FUNC_TYPES, ast.Lambda, ast.ClassDef)))
    out.sort(key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0)))
    return out
