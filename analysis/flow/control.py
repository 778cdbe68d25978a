"""Control dependence on the AST: which collective sites run on only some ranks, and why.

A site is *divergent* when
- ``cond``: a rank-varying ``if``/``while`` test (or conditional expression) decides whether it
  runs, and the other branch does not make the same collective;
- ``exit``: an early exit (``return``, ``break``, ``continue``, ``sys.exit()``/``os._exit()`` with a
  success status) under a rank-varying condition skips it: later in the same block, or, for
  ``break``/``return`` inside a loop, in the loop's later iterations;
- ``loop``: it sits in a loop whose trip count is rank-varying (a per-rank shard, a loader over a
  per-rank dataset without a DistributedSampler, a ``while`` on a rank-varying test);
- ``except``: it sits in a ``try`` body after a statement that computes on this rank's data (a
  forward on this rank's batch: where a CUDA out-of-memory error is raised on one rank only; not
  the mere packing of values already computed, ``payload = (stats, n)``), or it is a call of a
  project function that computes so before its collective (``_local_before_collective``), and a
  handler that catches that error (``RuntimeError``, ``torch.cuda.OutOfMemoryError``,
  ``Exception``, ``BaseException``, a bare ``except``) can finish without raising again: the rank
  that raised leaves the ``try`` body before the collective and goes on as if nothing happened.
  Not when the handler makes the same collectives itself, nor when it may finish only where the
  job is not distributed (``if world_size == 1: return None`` else ``raise``).

Not divergent: under DDP's ``join()`` context (``with model.join():`` / ``with Join([...]):``),
which shadows the collectives of ranks that ran out of inputs; conditions on values a collective
made uniform (see ``bindings``); ``raise`` and failing exits (``sys.exit(1)``), which stop the job
(the launcher tears the other ranks down) rather than leave them waiting.
"""
from __future__ import annotations

import ast

from ..semantic import BRANCHING, FUNC_TYPES, TRIES, parent
from .bindings import LOOPS, contains as _contains
from .context import call_context
from .gathers import dtensor_test_holds
from .calls import _wrapped, calls_by_name, instance_names, on_fresh_instance
from .summaries import INIT, _calls_in, dist_mode_test
from .unconditional import _holders_of_returns, holders_of

_EXIT_QNS = frozenset({"sys.exit", "os._exit"})
_SCOPES = (*FUNC_TYPES, ast.Lambda, ast.ClassDef, ast.Module)


class Divergence:
    __slots__ = ("kind", "site", "node", "value", "exit", "ctx", "view")

    def __init__(self, kind, site, node, value, exit=None, ctx=None, view=None):
        # node: the If/While (cond), the loop (loop), the If around the exit (exit); ctx: the
        # call-site context the function was analysed under (None: on its own); view: the module
        self.kind, self.site, self.node, self.value, self.exit = kind, site, node, value, exit
        self.ctx, self.view = ctx, view


def under_join(view, node: ast.AST) -> bool:
    if not _has_join_with(view):
        return False  # no ``with ...join():`` / ``with Join(...):`` anywhere in the module
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


def _has_join_with(view) -> bool:
    """Some ``with`` item of the module is a call that ``under_join`` takes for DDP's join (a call
    of a name or attribute ``join``/``Join``, or of a qualified name ending in ``.Join``), found
    through the file's call indexes once per module."""
    got = view.memo.get("has_join_with")
    if got is None:
        sem = view.sem
        names, attrs, _, _ = sem.callee_index()
        calls = sem.calls
        cands = [calls[i] for idx in (names, attrs) for k in ("join", "Join") for i in idx.get(k, ())]
        cands += [c for qn, lst in sem.calls_by_qualname.items() if qn.endswith(".Join") for c in lst]
        got = view.memo["has_join_with"] = any(
            c._p.__class__ is ast.withitem and c._p.context_expr is c for c in cands)
    return got


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


_NO_EXITS: list = []
_STMT_FIELDS = ("body", "orelse", "finalbody", "handlers", "cases")


def _exits(view, stmt: ast.stmt) -> list[ast.stmt]:
    """Early exits inside ``stmt`` (not in nested functions or classes), cached per statement
    (an enclosing statement reuses the lists of the statements it holds)."""
    memo = view.memo.get("exits")
    if memo is None:
        memo = view.memo["exits"] = {}
    got = memo.get(id(stmt))
    if got is not None:
        return got
    if stmt not in _exit_holders(view):
        memo[id(stmt)] = _NO_EXITS  # nothing below this statement can leave early
        return _NO_EXITS
    t = stmt.__class__
    if t is ast.Return or t is ast.Break or t is ast.Continue:
        got = [stmt]
    elif t is ast.Expr:
        got = [stmt] if stmt.value.__class__ is ast.Call and clean_exit_call(view, stmt) else _NO_EXITS
    elif t in _DEFS:
        got = _NO_EXITS  # a definition's exits leave the definition, not this block
    else:
        got = _NO_EXITS
        for f in _STMT_FIELDS:
            v = getattr(stmt, f, None)
            if v.__class__ is list:
                for c in v:
                    sub = _exits(view, c)
                    if sub:
                        got = got + sub if got else list(sub)
    memo[id(stmt)] = got
    return got


_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _exit_holders(view) -> set:
    """The statements that are, or hold, an early exit (``return``/``break``/``continue``,
    an exit call as a statement), up to the enclosing definition: ``_exits`` enters no other."""
    got = view.memo.get("exit_holders")
    if got is None:
        sem = view.sem
        starts = [*sem.by_type.get(ast.Break, ()), *sem.by_type.get(ast.Continue, ())]
        by_name = calls_by_name(view)
        for c in (*sem.calls_to(*_EXIT_QNS), *by_name.get("exit", ()), *by_name.get("quit", ())):
            if c._p.__class__ is ast.Expr:
                starts.append(c._p)
        got = view.memo["exit_holders"] = holders_of(starts, set(_holders_of_returns(view)))
    return got


def _block_exits(view, blk: list) -> list:
    """(index, statement, its early exits) for the statements of ``blk`` that hold any."""
    memo = view.memo.get("block_exits")
    if memo is None:
        memo = view.memo["block_exits"] = {}
    got = memo.get(id(blk))
    if got is None:
        holders = _exit_holders(view)
        got = memo[id(blk)] = [(j, st, exs) for j, st in enumerate(blk) if st in holders
                               for exs in (_exits(view, st),) if exs]
    return got


def _exit_condition(hub, view, ex: ast.stmt, top: ast.stmt, site_node: ast.AST, ctx=None):
    """(If node, value) of the innermost rank-varying test that decides whether ``ex`` runs, up
    to ``top``; None when none does or the exit does not leave a region holding the site."""
    ev = hub.evaluator(view, ctx)

    def varying(test):
        v = ev.value(test)
        return v if v.varying else None
    return _deciding_test(ex, top, site_node, varying)


def _deciding_test(ex: ast.stmt, top: ast.stmt, site_node: ast.AST, judge):
    """(If/While node, ``judge(test)``) of the innermost test up to ``top`` that decides whether
    ``ex`` runs and that ``judge`` does not answer None; None when there is none, when an exception
    handler decides it, or when a ``break``/``continue`` leaves a loop that does not hold the site."""
    n = parent(ex)
    if ex.__class__ in (ast.Break, ast.Continue):
        while n is not None:
            if isinstance(n, LOOPS):
                if not _contains(n, site_node):
                    return None
                break
            n = parent(n)
    child = ex
    p = parent(ex)
    while p is not None:
        if isinstance(p, ast.ExceptHandler):
            return None  # an exception on this rank: not a value we can judge
        if isinstance(p, (ast.If, ast.While)) and child is not p.test:
            v = judge(p.test)
            if v is not None:
                return p, v
        if p is top or isinstance(p, _SCOPES):
            break
        child = p
        p = parent(p)
    return None


def _skipping_exits(view, p: ast.AST, child: ast.stmt):
    """(exit, its statement in the block) for the early exits of the block of ``p`` that holds
    ``child`` and can skip it: before it in the block, or (in a loop's body) anywhere but a later
    ``continue``."""
    if p not in _exit_holders(view):
        return  # no statement in the blocks of ``p`` is or holds an early exit (``_block_exits``)
    for f in ("body", "orelse", "finalbody"):
        blk = getattr(p, f, None)
        if isinstance(blk, list) and child in blk:
            i = blk.index(child)
            loop_body = f == "body" and isinstance(p, LOOPS)
            for j, st, exs in _block_exits(view, blk):
                if j == i or (j > i and not loop_body):
                    continue
                for ex in exs:
                    if j > i and ex.__class__ is ast.Continue:
                        continue
                    yield ex, st
            return


def branching_scopes(view) -> frozenset:
    """The scopes (nodes: they hash by identity) that hold a node of ``semantic.BRANCHING`` (a
    condition, a loop; an early exit matters only under an ``if``/``while``) or a ``try`` with
    handlers directly, a class body
    counting as its enclosing scope: in any other scope, every statement runs whenever the scope
    runs."""
    got = view.memo.get("branching_scopes")
    if got is None:
        sem = view.sem
        found = set()
        for t in (*BRANCHING, *TRIES):
            for n in sem.by_type.get(t, ()):
                if t in TRIES and not n.handlers:
                    continue
                s = sem.scope_of(n)
                found.add(s)
                while isinstance(s, ast.ClassDef):
                    s = sem.scope_of(s)
                    found.add(s)
        got = view.memo["branching_scopes"] = frozenset(found)
    return got


def divergences(hub, view, scope: ast.AST, ctx=None) -> list[Divergence]:
    m = view.memo if ctx is None else ctx.memo
    memo = m.get("divergences")
    if memo is None:
        memo = m["divergences"] = {}
    got = memo.get(scope)  # keyed by the node (an ``id()`` key allocates an int per query)
    if got is not None:
        return got
    if scope not in branching_scopes(view):
        got = memo[scope] = []  # every statement of the scope runs whenever the scope runs
        return got
    out: list[Divergence] = []
    sites = hub.sites(view, scope, ctx)
    ev = hub.evaluator(view, ctx)
    join = _has_join_with(view)
    for site in sites:
        if join and under_join(view, site.node):
            continue
        d = _site_divergence(hub, view, scope, site, sites, ev, ctx)
        if d is None:
            d = _except_divergence(hub, view, scope, site, sites, ev, ctx)
        if d is not None:
            d.ctx, d.view = ctx, view
            out.append(d)
    memo[scope] = out
    return out


def _count(sites, whats, pred) -> dict:
    got = dict.fromkeys(whats, 0)
    for s in sites:
        if pred(s):
            for e in s.effects:
                if e.what in got:
                    got[e.what] += 1
    return got


def _mirrored(sites, site, region: ast.AST | list, own=None, ev=None, scope=None) -> bool:
    """The ranks that do not run ``site`` make the same collectives, as many times, elsewhere.

    ``region`` is either a statement list (the other branch of the ``if``, or what an exiting
    branch runs before it leaves), or the ``if`` node itself: then the counterparts are the sites
    outside it that run only under a rank-varying condition of their own (the staggered
    ``if rank != 0: barrier()`` ... ``if rank == 0: barrier()`` pattern). A site that every rank
    runs is no counterpart: it matches the same site on the other ranks, and the guarded one is
    extra (``if rank == 0: validate(ddp_model)`` beside the training forward). Counted per
    collective: ``own`` (the statements of the site's branch) makes that many, the counterparts
    must make at least as many."""
    whats = {e.what for e in site.effects}
    if own is not None:
        need = _count(sites, whats, lambda s: s is site or any(_contains(st, s.node) for st in own))
    else:
        need = _count(sites, whats, lambda s: s is site)
    if isinstance(region, list):
        have = _count(sites, whats, lambda s: s is not site and any(_contains(st, s.node) for st in region))
    else:
        have = _count(sites, whats, lambda s: s is not site and not _contains(region, s.node)
                      and _conditioned(s.node, scope, ev))
    return all(have[w] >= n for w, n in need.items())


def _conditioned(node: ast.AST, scope, ev) -> bool:
    """``node`` runs only where a rank-varying (or unknown) condition holds: under an ``if`` whose
    test is not known to be uniform, or after an early exit under one."""
    if ev is None:
        return True
    child, p = node, parent(node)
    while p is not None and p is not scope and not isinstance(p, _SCOPES):
        if isinstance(p, (ast.If, ast.IfExp, ast.While)) and child is not p.test and not ev.value(p.test).uniform:
            return True
        if isinstance(child, ast.stmt):
            for f in ("body", "orelse", "finalbody"):
                blk = getattr(p, f, None)
                if isinstance(blk, list) and child in blk:
                    for st in blk[:blk.index(child)]:
                        if isinstance(st, ast.If) and not ev.value(st.test).uniform and _exits(ev.view, st):
                            return True
                    break
        child, p = p, parent(p)
    if isinstance(child, ast.stmt) and p is not None:
        blk = getattr(p, "body", None)
        if isinstance(blk, list) and child in blk:
            for st in blk[:blk.index(child)]:
                if isinstance(st, ast.If) and not ev.value(st.test).uniform and _exits(ev.view, st):
                    return True
    return False


def _exit_mirrors(sites, site, if_node: ast.AST, ex: ast.stmt) -> bool:
    """The exiting branch makes the skipped collective itself before it leaves (``if rank not in
    members: dist.barrier(); return`` ... ``dist.barrier()``)."""
    blk = if_node.body if any(_contains(st, ex) for st in if_node.body) else if_node.orelse
    before = [st for st in blk if (st.lineno, st.col_offset) < (ex.lineno, ex.col_offset)]
    return _mirrored(sites, site, before)


def _site_divergence(hub, view, scope, site, sites, ev, ctx=None):
    child = site.node
    p = parent(child)
    conditioned = False
    holders = _exit_holders(view)  # only a block owner in there has exits (``_skipping_exits``)
    while p is not None:
        t = p.__class__
        if t is _IF:
            if child is not p.test:
                v = ev.value(p.test)
                if v.varying and not conditioned:
                    own, other = (p.body, p.orelse) if child in p.body else (p.orelse, p.body)
                    if not _mirrored(sites, site, other, own) and not _mirrored(sites, site, p, own, ev, scope):
                        return Divergence("cond", site, p, v)
                if not dist_mode_test(p.test) and not (child in p.body and dtensor_test_holds(hub, view, p.test)):
                    conditioned = True  # an outer condition may be correlated with this one
        elif t is _IFEXP:
            if child is not p.test:
                v = ev.value(p.test)
                if v.varying and not conditioned:
                    return Divergence("cond", site, p, v)
                conditioned = conditioned or not (child is p.body and dtensor_test_holds(hub, view, p.test))
        elif t is _WHILE:
            if child is not p.test:
                v = ev.value(p.test)
                if v.varying and child in p.body:
                    return Divergence("loop", site, p, v)
        elif (t is _FOR or t is _ASYNC_FOR) and child is not p.iter and child in p.body:
            v = ev.trip_count(p.iter)
            if v.varying:
                return Divergence("loop", site, p, v)
        # early exits in the same block before the site, or (in a loop) anywhere in its body
        # (not when the site has a condition of its own: it may be correlated with the exit's)
        if not conditioned and p in holders and isinstance(child, ast.stmt):
            for ex, st in _skipping_exits(view, p, child):
                got = _exit_condition(hub, view, ex, st, site.node, ctx)
                if got is not None and not _exit_mirrors(sites, site, got[0], ex) and not _group_starts_between(
                        hub, view, p, st, child):
                    return Divergence("exit", site, got[0], got[1], ex)
        if p is scope or t in _SCOPE_CLASSES:
            break
        child = p
        p = getattr(p, "_p", None)
    return None


def _group_starts_between(hub, view, p: ast.AST, st: ast.stmt, child: ast.stmt) -> bool:
    """A statement after ``st`` (the one holding the exit) and before ``child`` (the one holding the
    site), in the same block of ``p``, starts the process group on every run: the ranks that leave
    at the exit never join the group, so the collective the others make there does not wait for
    them (``if rank % tp: sys.exit(0)`` ... ``init_process_group(...)`` ... ``barrier()``). A later
    exit of a loop's body (it skips the next iterations) is not one of these."""
    for f in ("body", "orelse", "finalbody"):
        blk = getattr(p, f, None)
        if isinstance(blk, list) and child in blk:
            if st not in blk:
                return False
            j, i = blk.index(st), blk.index(child)
            return j < i and any(_starts_group(hub, view, s) for s in blk[j + 1:i])
    return False


def _starts_group(hub, view, st: ast.stmt, depth: int = 0) -> bool:
    """``st`` (a simple statement, a ``with`` or a ``return``) surely calls ``init_process_group``:
    directly, or through project functions whose body calls it (or such a function) at its top
    level before any other ``return`` or ``raise`` (not under ``if not dist.is_initialized():``:
    that may start nothing)."""
    if isinstance(st, ast.Return) and st.value is not None:
        calls = _calls_in(st.value)
    elif isinstance(st, (ast.Expr, ast.Assign, ast.AnnAssign, ast.AugAssign, ast.With)):
        calls = [c for it in st.items for c in _calls_in(it.context_expr)] if isinstance(st, ast.With) else _calls_in(st)
    else:
        return False
    for c in calls:
        if (view.sem.call_qualname(c) or "") == INIT:
            return True
        target = hub.resolve_call(view, c) if depth < 3 else None
        if target is not None:
            tv, fn = target
            body = getattr(fn, "body", None)
            if isinstance(body, list):
                for top in body:
                    if _starts_group(hub, tv, top, depth + 1):
                        return True
                    if any(isinstance(n, (ast.Return, ast.Raise)) for n in ast.walk(top)):
                        break  # may leave before the init
    return False


# the node classes ``_site_divergence`` tells apart (by class: the walk runs for every site)
_IF, _IFEXP, _WHILE, _FOR, _ASYNC_FOR = ast.If, ast.IfExp, ast.While, ast.For, ast.AsyncFor
_SCOPE_CLASSES = frozenset(_SCOPES)


def context_divergences(hub, view, scopes) -> list[Divergence]:
    """Divergences inside the project functions this module calls, as each call runs them: the
    callee analysed under the call's context (``context``), where an argument is rank-varying (a
    condition on it decides a collective, or an early exit on it skips one) or a DDP-wrapped
    module (its forward and backward are collectives there). Only what the callee's own analysis
    does not already find; conditions and exits only (``cond``/``exit``)."""

    memo = view.memo.setdefault("context_divergences", {})
    key = tuple(id(s) for s in scopes)
    if key in memo:
        return memo[key]
    out: list[Divergence] = []
    seen: set = set()
    wrapped = _wrapped(view, None)
    instances = instance_names(view)
    for sc in scopes:
        for c, target in hub.helper_calls(view, sc):
            if not c.args and not c.keywords:
                continue
            tv, fn = target
            if not hub.summary(tv, fn).collectives and not any(
                    _arg_name(a) in wrapped for a in (*c.args, *(k.value for k in c.keywords))) and not (
                    wrapped and isinstance(c.func, ast.Attribute) and (
                        isinstance(c.func.value, ast.Name) and c.func.value.id in instances
                        or on_fresh_instance(c.func, view))):
                continue
            wctx = view.memo.get("wrap_contexts", {})
            if not _may_diverge(hub, tv, fn) and (
                    wctx[id(c)] if id(c) in wctx else call_context(hub, view, c, target, None, want_binds=False)) is None:
                # no collective of the callee sits under a condition or after an exit, and the call
                # binds no DDP model (its sites are the plain ones): whatever the arguments' values,
                # no condition or exit can decide a collective there
                continue
            ctx = call_context(hub, view, c, target, None)
            if ctx is None:
                continue
            base = divergences(hub, tv, fn) if tv is view else []
            known = {(d.kind, id(d.site.node), id(d.exit)) for d in base}
            for d in divergences(hub, tv, fn, ctx):
                if d.kind not in ("cond", "exit", "except"):
                    continue
                k = (d.kind, id(d.site.node), id(d.exit), id(c) if tv is not view else 0)
                if k[:3] in known or k in seen:
                    continue
                seen.add(k)
                out.append(d)
    memo[key] = out
    return out


def _may_diverge(hub, view, fn: ast.AST) -> bool:
    """Some collective site of ``fn`` (its plain sites) could be decided by a condition or skipped
    by an exit if the tests were rank-varying: the shape ``_site_divergence`` looks for, with every
    test taken as varying (kinds "cond" and "exit" only)."""
    memo = view.memo.setdefault("may_diverge", {})
    got = memo.get(id(fn))
    if got is None:
        got = memo[id(fn)] = fn in branching_scopes(view) and any(
            _site_may_diverge(view, fn, s.node, s.kind == "helper") for s in hub.sites(view, fn))
    return got


def _site_may_diverge(view, scope, node, helper: bool = False) -> bool:
    child, p = node, parent(node)
    while p is not None:
        if isinstance(p, (ast.If, ast.IfExp)) and child is not p.test:
            return True
        if p.__class__ in _TRY and isinstance(child, ast.stmt) and child in p.body and p.handlers and (
                p.body[0] is not child or helper):
            return True  # an exception raised before it (or in the helper, first) may leave the ``try`` body (``_except_divergence``)
        if isinstance(child, ast.stmt) and any(
                _deciding_test(ex, st, node, _ANY_TEST) is not None for ex, st in _skipping_exits(view, p, child)):
            return True
        if p is scope or isinstance(p, _SCOPES):
            break
        child, p = p, parent(p)
    return False


_TRY = TRIES
# the exceptions a computation on this rank's data raises on this rank only (a CUDA out-of-memory
# error is a ``RuntimeError``), and the handlers that catch them
_LOCAL_ERRORS = frozenset({"RuntimeError", "Exception", "BaseException", "OutOfMemoryError",
                           "torch.cuda.OutOfMemoryError", "torch.OutOfMemoryError"})


def _except_divergence(hub, view, scope, site, sites, ev, ctx):
    """Divergence ``except`` (see the module's docstring) of ``site``, or None."""
    child, p = site.node, parent(site.node)
    while p is not None and not isinstance(p, _SCOPES):
        if p.__class__ in _TRY and isinstance(child, ast.stmt) and child in p.body and p.handlers:
            i = p.body.index(child)
            v = None
            for st in p.body[:i]:
                v = _local_compute(ev, st)
                if v is not None:
                    break
            if v is None and site.kind == "helper":
                v = _local_before_collective(hub, view, site.node, ctx)
            if v is not None:
                for h in p.handlers:
                    if not _catches_local_error(view, h):
                        continue
                    if not _always_raises(view, h.body) and not _mirrored(sites, site, h.body):
                        return Divergence("except", site, h, v, h)
                    break  # the first handler that catches the error decides
        if p is scope:
            break
        child, p = p, parent(p)
    return None


def _local_compute(ev, st: ast.stmt):
    """The value ``st`` computes when it is computed from this rank's data (so an error it raises,
    such as running out of memory, may be raised on this rank only), else None."""
    from .values import DATA

    if isinstance(st, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr)) and st.value is not None:
        if not isinstance(st, ast.AugAssign) and _packing(st.value):
            return None  # packing values already computed allocates no device memory and cannot fail
        v = ev.value(st.value)
        if v.varying and v.src is not None and v.src.cat == DATA:
            return v
    return None


def _local_before_collective(hub, view, call: ast.Call, pctx):
    """The value that the project function ``call`` runs (analysed under the call's context)
    computes from this rank's data in a top-level statement before a later one that holds a
    collective, no earlier statement holding one (``micro(mb)`` whose body runs the forward on
    ``mb`` before ``loss.backward()``), else None: an error raised there leaves the caller's
    ``try`` body before the collective."""
    target = hub.resolve_call(view, call)
    if target is None:
        return None
    tv, fn = target
    cctx = call_context(hub, view, call, target, pctx)
    if cctx is None or not isinstance(getattr(fn, "body", None), list):
        return None
    ev = hub.evaluator(tv, cctx)
    nodes = [s.node for s in hub.sites(tv, fn, cctx)]
    for i, st in enumerate(fn.body):
        v = _local_compute(ev, st)
        if v is not None:
            return v if any(_contains(later, n) for later in fn.body[i + 1:] for n in nodes) else None
        if any(_contains(st, n) for n in nodes):
            return None
    return None


def _packing(e: ast.expr) -> bool:
    """``e`` only names values already computed or packs them into a tuple, list, set or dict with
    constant keys (``payload = (per_name, steps)``): evaluating it cannot raise on one rank only."""
    if isinstance(e, (ast.Name, ast.Constant)):
        return True
    if isinstance(e, (ast.Tuple, ast.List, ast.Set)):
        return all(_packing(x) for x in e.elts)
    if isinstance(e, ast.Dict):
        return all(isinstance(k, ast.Constant) for k in e.keys) and all(
            _packing(x) for x in e.values)
    return False


def _catches_local_error(view, h: ast.ExceptHandler) -> bool:
    t = h.type
    if t is None:
        return True
    types = t.elts if isinstance(t, ast.Tuple) else [t]
    for e in types:
        qn = view.sem.qualname(e)
        name = e.attr if isinstance(e, ast.Attribute) else getattr(e, "id", None)
        if name in _LOCAL_ERRORS or (qn or "") in _LOCAL_ERRORS:
            return True
    return False


def _always_raises(view, body: list) -> bool:
    """Every path through ``body`` ends in a ``raise`` or a failing exit, or finishes only where
    the job is not distributed (an ``if`` on the distributed mode whose other branch raises)."""
    if not body:
        return False
    last = body[-1]
    if isinstance(last, ast.Raise):
        return True
    if isinstance(last, ast.Expr) and isinstance(last.value, ast.Call) and (
            view.sem.call_qualname(last.value) or "") in _EXIT_QNS and not clean_exit_call(view, last):
        return True
    for st in body:
        if isinstance(st, ast.If):
            a, b = _always_raises(view, st.body), _always_raises(view, st.orelse)
            if a and b:
                return True
            if (a or b) and dist_mode_test(st.test):
                return True
    return False


def _ANY_TEST(test) -> bool:
    return True  # every test taken as varying


def _arg_name(a: ast.AST) -> str | None:
    if isinstance(a, ast.Name):
        return a.id
    if isinstance(a, ast.Attribute):
        return a.attr
    return None
