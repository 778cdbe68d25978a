"""The default process group's lifetime: which calls create it (``init_process_group``) and which
tear it down (``destroy_process_group``), directly or through project functions (across files),
and under which conditions of the function that makes them.

- ``lifecycle_of(hub, view, fn)``: ("must" | "may" | None for the init, "must" | None for the
  destroy) of a project function: "must" when every normal return of ``fn`` went through it;
- ``events(hub, view, scope)``: the ``Event``s of a scope in source order, each with its path
  conditions (``conditions``): the ``if`` branches around it and the early exits before it;
- ``harmless(view, test)``: a test on the group itself (``dist.is_initialized()``,
  ``dist.is_available()``): an init under ``if not dist.is_initialized():`` leaves a group either way,
  a destroy under ``if dist.is_initialized():`` never fails.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, parent
from ..torch_api import D

INIT, DESTROY = D + "init_process_group", D + "destroy_process_group"
_GROUP_TESTS = frozenset({D + "is_initialized", D + "is_available", D + "is_torchelastic_launched"})
_TERMINAL = (ast.Return, ast.Raise, ast.Continue, ast.Break)
_EXIT_QNS = frozenset({"sys.exit", "os._exit", "exit", "quit"})


class Event:
    """``call`` inits or destroys the default group (``kind``), "must" or "may" (a helper that does
    it only on some of its paths); ``conds``: (if node, "body" | "orelse" | "after") on its path."""

    __slots__ = ("call", "kind", "sure", "conds", "where")

    def __init__(self, call, kind, sure, conds, where=None):
        self.call, self.kind, self.sure, self.conds, self.where = call, kind, sure, conds, where


def mode_test(sem, test: ast.AST) -> bool:
    """A test on whether the job runs distributed at all (``unconditional.dist_mode_test``:
    ``args.distributed``, ``world_size > 1``), or on the launcher's variables
    (``"RANK" in os.environ``): the path where it fails is the single-process run."""
    from .rank_tests import GLOBAL_RANK_ENV, LOCAL_RANK_ENV
    from .unconditional import dist_mode_test
    from .world import WORLD_SIZE_ENV

    if dist_mode_test(test):
        return True
    keys = GLOBAL_RANK_ENV | LOCAL_RANK_ENV | WORLD_SIZE_ENV
    return any(isinstance(n, ast.Constant) and n.value in keys for n in ast.walk(test))


def harmless(sem, test: ast.AST) -> bool:
    """``test`` asks whether the group exists (or can): ``dist.is_initialized()``."""
    for n in ast.walk(test):
        if isinstance(n, ast.Call) and (sem.call_qualname(n) or "") in _GROUP_TESTS:
            return True
    return False


def _ends(sem, body) -> bool:
    if not body:
        return False
    last = body[-1]
    if isinstance(last, _TERMINAL):
        return True
    if isinstance(last, ast.Expr) and isinstance(last.value, ast.Call):
        qn = sem.call_qualname(last.value) or (last.value.func.id if isinstance(last.value.func, ast.Name) else "")
        return qn in _EXIT_QNS
    return False


def conditions(sem, node: ast.AST, scope: ast.AST) -> list | None:
    """The path conditions of ``node`` in ``scope``: (if, branch) for each ``if`` around it and
    each ``if ...: return`` before it in an enclosing block, when the test is on the distributed
    mode (``mode_test``; other tests are not the single-process run and are left out), leaving out
    the tests on the group itself and the ``if`` whose other branch leaves (``else: raise``). None when ``node`` sits in a
    handler, a nested definition, a ``match`` or a conditional expression (not followed)."""
    out = []
    child, p = node, parent(node)
    while p is not None:
        if p is scope:
            _exits_before(sem, p, child, out)
            break
        if isinstance(p, (ast.ExceptHandler, ast.IfExp, ast.BoolOp, ast.Lambda, *FUNC_TYPES, ast.ClassDef)) \
                or p.__class__.__name__ in ("match_case", "Match"):
            return None
        if isinstance(p, ast.If) and child is not p.test:
            branch = "body" if child in p.body else "orelse"
            other = p.orelse if branch == "body" else p.body
            if _counts(sem, p.test) and not _ends(sem, other):
                out.append((p, branch))
        _exits_before(sem, p, child, out)
        child, p = p, parent(p)
    return out


def _exits_before(sem, p, child, out) -> None:
    """``if <test>: return`` before ``child`` in its block of ``p``: (if, "after")."""
    for field in ("body", "orelse", "finalbody"):
        block = getattr(p, field, None)
        if isinstance(block, list) and child in block:
            for st in block[: block.index(child)]:
                if isinstance(st, ast.If) and _counts(sem, st.test) and not st.orelse and st.body \
                        and isinstance(st.body[-1], (ast.Return, ast.Continue, ast.Break)):
                    out.append((st, "after"))
            return


def _counts(sem, test) -> bool:
    """A condition that matters here: a test on the distributed mode, not on the group itself."""
    return mode_test(sem, test) and not harmless(sem, test)


def _same(sem, a, b) -> bool:
    (ia, ba), (ib, bb) = a, b
    if ia is ib:
        return ba == bb
    return ba == bb and ast.dump(ia.test) == ast.dump(ib.test)


def covered(sem, init_conds, destroy_conds) -> bool:
    """Every condition of the init holds where the destroy runs."""
    return all(any(_same(sem, c, d) for d in destroy_conds) for c in init_conds)


def lifecycle_of(hub, view, fn, depth: int = 0):
    """(init, destroy) of a project function: "must" / "may" / None each (destroy: "must" only)."""
    if not isinstance(fn, FUNC_TYPES) or depth > 3:
        return None, None
    memo = view.memo.setdefault("lifecycle", {})
    if id(fn) in memo:
        return memo[id(fn)]
    memo[id(fn)] = (None, None)  # recursion guard
    init = destroy = None
    evs = events(hub, view, fn, depth + 1)
    both = both_branches(evs)
    for ev in evs:
        unconditional = ev.sure == "must" and not [c for c in ev.conds if id(c[0]) not in both]
        if ev.kind == "init":
            if unconditional:
                init = "must"
            elif init is None:
                init = "may"
        elif unconditional:
            destroy = "must"
    memo[id(fn)] = (init, destroy)
    return init, destroy


def events(hub, view, scope, depth: int = 0) -> list[Event]:
    """The init and destroy events of ``scope`` (direct calls and calls of project functions that
    make them), in source order. A destroy under a test on the group itself is no event; an init
    or a destroy whose path is not followed (``conditions`` None) is an init "may" / no event."""
    from .calls import scope_calls
    from .fs_effects import may_resolve_any, resolve

    memo = view.memo.setdefault("lifecycle.events", {})
    if id(scope) in memo:
        return memo[id(scope)]
    memo[id(scope)] = []
    sem = view.sem
    out = []
    for c in scope_calls(view, scope):
        qn = sem.call_qualname(c) or ""
        kind = sure = None
        where = None
        if qn == INIT:
            kind, sure = "init", "must"
        elif qn == DESTROY:
            kind, sure = "destroy", "must"
        elif not qn.startswith("torch.") and may_resolve_any(view, c):
            target = resolve(hub, view, c)
            if target is not None and target[1] is not scope:
                i, d = lifecycle_of(hub, *target, depth=depth)
                if i is not None:
                    kind, sure, where = "init", i, target
                elif d is not None:
                    kind, sure, where = "destroy", d, target
        if kind is None:
            continue
        conds = conditions(sem, c, scope)
        if conds is None:
            if kind == "destroy":
                continue
            sure, conds = "may", []
        if kind == "destroy" and _under_group_test(sem, c, scope):
            continue
        out.append(Event(c, kind, sure, conds, where))
    out.sort(key=lambda e: (e.call.lineno, e.call.col_offset))
    memo[id(scope)] = out
    return out


def _under_group_test(sem, node, scope) -> bool:
    p = parent(node)
    while p is not None and p is not scope:
        if isinstance(p, (ast.If, ast.IfExp, ast.While)) and harmless(sem, p.test):
            return True
        if isinstance(p, ast.BoolOp) and any(harmless(sem, v) for v in p.values):
            return True
        p = parent(p)
    return False


def both_branches(events_: list[Event]) -> set:
    """The ``if`` nodes with an init in both branches (``if args.dist: init(nccl) else: init(gloo)``)."""
    seen: dict[int, set] = {}
    for e in events_:
        if e.kind == "init":
            for n, b in e.conds:
                seen.setdefault(id(n), set()).add(b)
    return {k for k, v in seen.items() if {"body", "orelse"} <= v}
