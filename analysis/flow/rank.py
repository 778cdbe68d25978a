"""Which ranks run this node: the rank guards around it.

- ``rank_guard(ctx, node)``: the innermost ``if`` (or early exit before it) that makes ``node`` run
  on a subset of the ranks only (``rank_tests.rank_test``): a collective there leaves the other
  ranks waiting.
- ``rank0_guarded(ctx, node)``: True when only the main rank (or one chosen rank) gets to ``node``
  (``rank_tests.polarity``: an ``if``, the ``else`` of a negated test, an early exit, an
  ``assert``, a ``@rank_zero_only``-style decorator, or a helper whose every call site in the file
  is guarded; an ``__init__`` is called where its module-level class is built; a callback runs
  where the project function it is passed to calls it), False when every
  rank gets there, None when it cannot tell (a function this file never calls). Callers stay
  silent on None.

Both are walks up parent pointers plus the semantic indexes: no tree walk.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, parent, terminal_name
from ..torch_api import rank_entry
from .rank_tests import Test, is_main_decorated, polarity, rank_test

_TERMINATORS = (ast.Return, ast.Raise, ast.Continue, ast.Break)
_EXIT_FUNCS = frozenset({"exit", "_exit", "abort"})


# -- a subset of the ranks ---------------------------------------------------------------------------

class Guard:
    """``node`` runs only on a subset of ranks because of ``if_node`` (``branch`` is "body",
    "orelse", or "after" for code after ``if <test>: return``)."""

    __slots__ = ("if_node", "branch", "test")

    def __init__(self, if_node: ast.If, branch: str, test: Test):
        self.if_node, self.branch, self.test = if_node, branch, test

    def key(self, ctx) -> tuple:
        return (ctx.text(self.if_node.test), self.branch)


def terminates(body: list[ast.stmt]) -> bool:
    """The block ends in ``return`` / ``raise`` / ``continue`` / ``break``."""
    return bool(body) and isinstance(body[-1], _TERMINATORS)


def rank_guard(ctx, node: ast.AST) -> Guard | None:
    """The innermost rank guard of ``node`` within its function (or module)."""
    scope = ctx.sem.scope_of(node)
    owners = _exit_if_owners(ctx)
    child = node
    p = parent(node)
    while p is not None:
        if isinstance(p, ast.If) and child is not p.test:
            # the body comes before the ``else`` in the source (no scan of the body)
            o = p.orelse
            in_body = not o or (child.lineno, child.col_offset) < (o[0].lineno, o[0].col_offset)
            t = rank_test(ctx, p.test, scope)
            if t is not None:
                if in_body and t.body:
                    return Guard(p, "body", t)
                if not in_body and t.orelse:
                    return Guard(p, "orelse", t)
        # early exits before ``child`` in the same block: ``if not is_main: return``
        if id(p) in owners:
            g = _after_exit(ctx, p, child, scope)
            if g is not None:
                return g
        if isinstance(p, _GUARD_SCOPES):
            break
        child = p
        p = parent(p)
    return None


_GUARD_SCOPES = (*FUNC_TYPES, ast.Lambda, ast.ClassDef)  # where ``rank_guard`` stops


def _after_exit(ctx, owner: ast.AST, child: ast.AST, scope) -> Guard | None:
    """The closest early exit ``if <rank test>: return`` before ``child`` in its block of
    ``owner``. Each block is scanned once per check (a prefix of guards by position), so asking
    for every statement of a long block stays linear."""
    memo = ctx.memo("flow.rank.after_exit", dict)
    for field in ("body", "orelse", "finalbody"):
        block = getattr(owner, field, None)
        if not isinstance(block, list) or not block:
            continue
        key = (id(owner), field, id(scope))
        got = memo.get(key)
        if got is None:
            pos: dict[int, int] = {}
            guards: list[Guard | None] = []
            cur = None
            for i, st in enumerate(block):
                pos[id(st)] = i
                guards.append(cur)
                if st.__class__ is ast.If and terminates(st.body) and not st.orelse:
                    t = rank_test(ctx, st.test, scope)
                    if t is not None and t.orelse:
                        cur = Guard(st, "after", t)
            got = memo[key] = (pos, guards)
        i = got[0].get(id(child))
        if i is not None:
            return got[1][i]
    return None


def _exit_if_owners(ctx) -> frozenset:
    """ids of the nodes with an ``if`` in one of their blocks whose body ends in an exit and that has
    no ``else`` (the early exits ``rank_guard`` looks for): no other block needs scanning."""
    def build():
        return frozenset(id(parent(n)) for n in ctx.sem.by_type.get(ast.If, ())
                         if terminates(n.body) and not n.orelse)
    return ctx.memo("flow.rank.exit_if_owners", build)


# -- the main rank only -----------------------------------------------------------------------------

def _ends_in_exit(body: list[ast.stmt]) -> bool:
    """``terminates``, or ends in a call of ``exit()`` / ``sys.exit()`` / ``os._exit()`` / ``abort()``."""
    if not body:
        return False
    last = body[-1]
    if isinstance(last, _TERMINATORS):
        return True
    if isinstance(last, ast.Expr) and isinstance(last.value, ast.Call):
        n = terminal_name(last.value.func)
        return n in _EXIT_FUNCS
    return False


def rank0_guarded(ctx, node: ast.AST, depth: int = 0, callers: bool = True) -> bool | None:
    """True when ``node`` runs only on the main rank; False when every rank runs it; None when the
    function holding it is never called in this file (cannot tell). ``callers=False``: the tests
    inside the function holding ``node`` only (None at its top: its callers decide)."""
    sem = ctx.sem
    child = node
    p = parent(node)
    while p is not None:
        if isinstance(p, (ast.If, ast.IfExp, ast.While)):
            scope = sem.scope_of(p)
            if child is p.test:
                pass
            elif isinstance(p, ast.IfExp):
                pol = polarity(ctx, p.test, scope)
                if (child is p.body and pol is True) or (child is p.orelse and pol is False):
                    return True
            else:
                pol = polarity(ctx, p.test, scope)
                in_body = child in p.body
                if (in_body and pol is True) or (not in_body and child in p.orelse and pol is False):
                    return True
        if isinstance(child, ast.stmt):
            block = _block_of(p, child)
            if block is not None and any(_exit_tests(ctx, block, child, sem.scope_of(child), True)):
                return True
        if isinstance(p, FUNC_TYPES):
            if is_main_decorated(p):
                return True
            return _callers_guarded(ctx, p, depth) if callers else None
        if isinstance(p, (ast.Lambda, ast.ClassDef)):
            return None
        child = p
        p = parent(p)
    return False  # module level, unguarded


def _block_of(parent: ast.AST, child: ast.stmt) -> list[ast.stmt] | None:
    for field in ("body", "orelse", "finalbody"):
        lst = getattr(parent, field, None)
        if isinstance(lst, list) and child in lst:
            return lst
    return None


def _call_index(ctx):
    """One pass over the calls: callee name -> call sites, method name -> call sites, name ->
    calls that take it as a bare argument, and name -> the rank starters that run it in each rank
    (``torch_api.rank_entry``: ``mp.spawn(fn)``, ``elastic_launch(cfg, entrypoint=fn)``), cached on
    the context."""
    return ctx.memo("rank.call_index", lambda: _build_call_index(ctx))


def _build_call_index(ctx):
    by_name: dict[str, list[ast.Call]] = {}
    by_attr: dict[str, list[ast.Call]] = {}
    as_arg: dict[str, list[ast.Call]] = {}
    started: dict[str, list[ast.Call]] = {}
    for c in ctx.sem.calls:
        f = c.func
        if isinstance(f, ast.Name):
            by_name.setdefault(f.id, []).append(c)
        elif isinstance(f, ast.Attribute) and ctx.qn(c) is None:
            by_attr.setdefault(f.attr, []).append(c)
        for a in c.args:
            if isinstance(a, ast.Name):
                as_arg.setdefault(a.id, []).append(c)
        e = rank_entry(ctx.sem, c)
        if isinstance(e, ast.Name):
            started.setdefault(e.id, []).append(c)
    return by_name, by_attr, as_arg, started


def _callers_guarded(ctx, fn: ast.AST, depth: int) -> bool | None:
    """Every call of ``fn`` in the file is rank-0 guarded: True; some call is not: False; no call:
    None. A function passed to ``mp.spawn`` (or ``elastic_launch``'s entrypoint) runs on every rank: False; passed to a project function
    that calls it, where that call runs (``_callback_guarded``); passed elsewhere: None."""
    if depth > 3:
        return None
    cache = ctx.memo("rank.callers_guarded", dict)
    key = (id(fn), depth)
    if key in cache:
        return cache[key]
    cache[key] = None  # recursion guard
    res = _callers_guarded_uncached(ctx, fn, depth)
    cache[key] = res
    return res


def _callers_guarded_uncached(ctx, fn: ast.AST, depth: int) -> bool | None:
    name = fn.name
    is_method = isinstance(parent(fn), ast.ClassDef)
    by_name, by_attr, as_arg, started = _call_index(ctx)
    results = []
    if not is_method:
        if started.get(name):
            return False  # every rank a starter starts runs it
        for c in as_arg.get(name, ()):
            got = _callback_guarded(ctx, c, name, depth)
            if got is None:
                return None
            results.append(got)
    sites = by_attr.get(name, ()) if is_method else by_name.get(name, ())
    if is_method and name == "__init__" and isinstance(parent(parent(fn)), ast.Module):
        sites = by_name.get(parent(fn).name, ())  # a constructor runs where its class is built
    if not sites and not results:
        return None
    for c in sites:
        if c.lineno >= fn.lineno and c.end_lineno <= fn.end_lineno:
            continue  # recursion
        results.append(rank0_guarded(ctx, c, depth + 1))
    if not results:
        return None
    if all(r is True for r in results):
        return True
    if False in results:
        return False
    return None


def _callback_guarded(ctx, call: ast.Call, name: str, depth: int) -> bool | None:
    """A function passed as ``name`` to ``call`` of a project function runs where ``call`` runs,
    unless the callee calls it only behind a main-rank test of its own (``callback_runs``)."""
    inside = callback_runs(ctx, call, name)
    return inside if inside is not False else rank0_guarded(ctx, call, depth + 1)


def callback_runs(ctx, call: ast.Call, name: str) -> bool | None:
    """The function ``name`` passed as a bare argument to ``call`` of a project function
    (``save_on_epoch_end(args, save_func)``, in this module or another) that calls the parameter it
    binds: False when the callee calls it with no main-rank test of its own (it runs where ``call``
    runs), True when only behind one. None when the callee is not the project's, rebinds or keeps
    the parameter without calling it, or this is no rule's context (a view of another module)."""
    if getattr(ctx, "src", None) is None:
        return None  # a view of another module: no project hub to resolve the callee with
    from .viewctx import view_ctx
    from .helper_calls import bind_args
    from .modern import hub

    an, view = hub(ctx)
    target = an.resolve_call(view, call)
    if target is None:
        return None
    tview, callee = target
    param = next((p for p, a in bind_args(call, callee).items() if isinstance(a, ast.Name) and a.id == name), None)
    if param is None or tview.sem.assignments(callee).get(param):
        return None
    runs = [c for c in tview.sem.calls if isinstance(c.func, ast.Name) and c.func.id == param
            and tview.sem.enclosing_function(c) is callee]
    if not runs:
        return None
    return all(rank0_guarded(view_ctx(tview), c, callers=False) is True for c in runs)


def callback_calls(ctx, fn: ast.AST) -> list[ast.Call]:
    """The calls of this file that run the function ``fn`` as a callback: ``fn`` passed as a bare
    argument to a project function that calls it with no main-rank test (``callback_runs``)."""
    if isinstance(parent(fn), ast.ClassDef):
        return []
    return [c for c in _call_index(ctx)[2].get(fn.name, ()) if callback_runs(ctx, c, fn.name) is False]


def main_guards(ctx, node: ast.AST, main_only: bool = True) -> list[tuple[ast.AST, bool]]:
    """The main-rank tests that ``node`` sits behind in its function (or module), innermost first:
    (test, the value it has when ``node`` runs), for each ``if``/``while``/conditional expression,
    early exit and ``assert`` that ``rank0_guarded`` reads as a main-rank test (``polarity``).
    ``main_only=False``: every such test, whatever it tests (the caller reads them)."""
    sem = ctx.sem
    out: list[tuple[ast.AST, bool]] = []
    child = node
    p = parent(node)
    while p is not None:
        if isinstance(p, (ast.If, ast.IfExp, ast.While)) and child is not p.test:
            pol = polarity(ctx, p.test, sem.scope_of(p)) if main_only else None
            in_body = child is p.body if isinstance(p, ast.IfExp) else child in p.body
            if (pol is not None and in_body == pol) or not main_only:
                out.append((p.test, in_body))
        if isinstance(child, ast.stmt):
            block = _block_of(p, child)
            if block is not None:
                out.extend(_exit_tests(ctx, block, child, sem.scope_of(child), main_only))
        if isinstance(p, (*FUNC_TYPES, ast.Lambda, ast.ClassDef)):
            break
        child = p
        p = parent(p)
    return out


def _exit_tests(ctx, block: list, child: ast.stmt, scope: ast.AST, main_only: bool):
    """(test, the value it has when ``child`` runs) of each early exit before ``child`` in
    ``block``: an ``if`` whose branch ends in an exit, an ``assert``; ``main_only``: only those
    ``polarity`` reads as main-rank tests (the one walk of ``rank0_guarded`` and ``main_guards``)."""
    for s in block:
        if s is child:
            break
        if isinstance(s, ast.If):
            pol = polarity(ctx, s.test, scope) if main_only else None
            if (pol is False or not main_only) and _ends_in_exit(s.body):
                yield s.test, False
            elif (pol is True or not main_only) and s.orelse and _ends_in_exit(s.orelse):
                yield s.test, True
        elif isinstance(s, ast.Assert) and (not main_only or polarity(ctx, s.test, scope) is True):
            yield s.test, True


def callers_guarded(ctx, fn: ast.AST) -> bool | None:
    """Every call of ``fn`` in this file runs on the main rank only (True), one runs on every rank
    (False), or there is none to tell (None)."""
    return _callers_guarded(ctx, fn, 0)
