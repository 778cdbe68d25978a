"""Collectives a function makes only for some arguments: ``if is_sharded: dist.barrier()`` where
``is_sharded`` is a local flag computed from the function's parameters by a test of a wrapper type
(``is_sharded = any(isinstance(m, FSDP) for m in models)``, also through a project helper that
returns such a test, ``_is_sharded(m)``). The name of such a flag reads as "is the job
distributed" (``unconditional.dist_mode_test``), but its value follows what the call passes: False
when every module the call gives those parameters is a plain instance of a project class, never
wrapped (DDP/FSDP) nor sharded (``fully_shard``, ``parallelize_module``). ``summaries`` keeps, for
each collective of a summary, the parameters such a flag reads (``guard_params``), and drops the
collective at a call that passes plain modules there (``plain_call``)."""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, param_defaults, parent, subtree
from .bindings import reaching
from .context import call_args
from .unconditional import dist_mode_test

# the types whose instances only a distributed wrapping makes (a plain module is none of them)
_WRAPPER_TYPES = frozenset(("FullyShardedDataParallel", "FSDPModule", "DTensor", "DistributedDataParallel"))
_BUILTINS = frozenset(("any", "all", "isinstance", "len", "list", "tuple", "dict", "set", "iter", "next",
                       "sorted", "bool", "hasattr", "getattr", "enumerate", "zip", "map", "filter"))
_MAX_DEPTH = 3


def guard_params(hub, view, node, fn):
    """The parameters of ``fn`` whose arguments decide a flag ``if <flag>:`` around ``node`` (in
    its body) that only a wrapped or sharded argument makes true; empty when none."""
    got = set()
    child, p = node, parent(node)
    while p is not None and p is not fn:
        if (isinstance(p, ast.If) and child is not p.test and any(child is s for s in p.body)
                and isinstance(p.test, ast.Name) and dist_mode_test(p.test)):
            ps = _flag_params(hub, view, fn, p.test, p)
            if ps:
                got |= ps
        child, p = p, parent(p)
    return frozenset(got)


def _flag_params(hub, view, fn, name: ast.Name, at):
    """The parameters the local flag ``name`` reads, when every binding of it that reaches ``at``
    is False/None or a positive wrapper-type test (``_positive``) of values read from parameters
    only; else None."""
    kind, evs = reaching(view, name.id, at)
    if kind != "events" or not evs:
        return None
    params = set()
    for e in evs:
        if not (isinstance(e, (ast.Assign, ast.AnnAssign)) and e.value is not None
                and _single_target(e, name.id)):
            return None
        if isinstance(e.value, ast.Constant):
            if e.value.value not in (False, None):
                return None
            continue
        if not _positive(hub, view, e.value, 0):
            return None
        got = _param_reads(view, fn, e.value, e, 0)
        if got is None:
            return None
        params |= got
    return frozenset(params) or None


def _single_target(e, name: str) -> bool:
    t = e.targets[0] if isinstance(e, ast.Assign) and len(e.targets) == 1 else getattr(e, "target", None)
    return isinstance(t, ast.Name) and t.id == name


def _wrapper_type(view, t) -> bool:
    qn = view.sem.qualname(t) or ""
    return qn.startswith("torch.") and qn.rsplit(".", 1)[-1] in _WRAPPER_TYPES


def _positive(hub, view, expr, depth) -> bool:
    """``expr`` is true only where a value is an instance of a wrapper type: ``isinstance(x, FSDP)``
    (or a tuple of such types), ``any(...)`` of such tests, ``a or b`` of them, ``a and b`` with one
    of them, False/None, or a call of a project function every ``return`` of which is one."""
    if isinstance(expr, ast.Constant):
        return expr.value in (False, None)
    if isinstance(expr, ast.BoolOp):
        if isinstance(expr.op, ast.Or):
            return all(_positive(hub, view, v, depth) for v in expr.values)
        return any(_positive(hub, view, v, depth) for v in expr.values)
    if not isinstance(expr, ast.Call):
        return False
    f = expr.func
    if isinstance(f, ast.Name) and f.id == "isinstance" and len(expr.args) == 2 and not expr.keywords:
        t = expr.args[1]
        types = t.elts if isinstance(t, ast.Tuple) else [t]
        return bool(types) and all(_wrapper_type(view, x) for x in types)
    if isinstance(f, ast.Name) and f.id == "any" and len(expr.args) == 1 and not expr.keywords:
        g = expr.args[0]
        return isinstance(g, (ast.GeneratorExp, ast.ListComp)) and _positive(hub, view, g.elt, depth)
    if depth >= _MAX_DEPTH:
        return False
    target = hub.resolve_call(view, expr)
    if target is None or not isinstance(target[1], FUNC_TYPES):
        return False
    tv, tf = target
    rets = [n for n in subtree(tf) if isinstance(n, ast.Return) and tv.sem.enclosing_function(n) is tf]
    return bool(rets) and all(r.value is not None and (_positive(hub, tv, r.value, depth + 1) or _guarded_true(
        hub, tv, r, depth + 1)) for r in rets)


def _guarded_true(hub, view, ret, depth) -> bool:
    """``return True`` right inside ``if <positive test>:`` (``if isinstance(m, FSDP): return True``)."""
    p = parent(ret)
    return (isinstance(ret.value, ast.Constant) and ret.value.value is True and isinstance(p, ast.If)
            and any(ret is s for s in p.body) and _positive(hub, view, p.test, depth))


def _param_reads(view, fn, expr, at, depth):
    """The parameters of ``fn`` that ``expr`` (at the statement ``at``) reads, directly or through
    locals bound from them; None when it reads anything else (a global, an attribute's owner that
    is no parameter, a local bound otherwise)."""
    if depth > 4:
        return None
    bound = {n.id for n in ast.walk(expr) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    got = set()
    for n in ast.walk(expr):
        if not (isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)) or n.id in bound:
            continue
        if n.id in _BUILTINS or n.id in view.defs:
            continue  # a builtin, or a function of the module (what it returns is ``_positive``'s)
        if n.id in view.imports and view.sem.qualname(n) is not None and isinstance(parent(n), ast.Call) \
                and parent(n).func is n:
            continue  # an imported function, called
        kind, evs = reaching(view, n.id, at)
        if kind == "param":
            got.add(n.id)
            continue
        if kind not in ("events", "events+param") or not evs:
            return None
        for e in evs:
            if isinstance(e, (ast.Assign, ast.AnnAssign)) and e.value is not None and _single_target(e, n.id):
                sub = _param_reads(view, fn, e.value, e, depth + 1)
                if sub is None:
                    return None
                got |= sub
            else:
                return None
        if _is_param(fn, n.id):
            got.add(n.id)  # a parameter rebound in the body (``models = [models]``)
    return got


def _is_param(fn, name: str) -> bool:
    a = fn.args
    return any(p.arg == name for p in (*a.posonlyargs, *a.args, *a.kwonlyargs))


def plain_call(hub, view, call, fn, params) -> bool:
    """Every argument ``call`` gives the parameters ``params`` of ``fn`` is a plain module: an
    instance of a project class (or a list or tuple of them), never wrapped in DDP/FSDP nor sharded;
    a parameter the call does not give keeps its default (None or False)."""
    given = {p: a for p, a in call_args(call, fn)}
    for p in params:
        a = given.get(p)
        if a is None:
            d = param_defaults(fn).get(p)
            if not (isinstance(d, ast.Constant) and d.value in (None, False)):
                return False
            continue
        items = a.elts if isinstance(a, (ast.List, ast.Tuple)) else [a]
        if not items or not all(_plain_module(hub, view, x, call) for x in items):
            return False
    return True


def _plain_module(hub, view, expr, at) -> bool:
    from .gathers import sharded_module

    if not isinstance(expr, ast.Name):
        return False
    if hub.module_class(view, expr, at) is None:
        return False
    return hub.wrapper_ctor(view, expr, at) is None and not sharded_module(hub, view, expr, at)


def unguarded(hub, view, call, fn, s) -> tuple:
    """The collectives of the summary ``s`` of ``fn`` that ``call`` makes: ``s.must`` without those
    behind a flag (``guard_params``) that the modules ``call`` passes leave false."""
    return tuple(e for e, g in zip(s.must, s.guards) if not g or not plain_call(hub, view, call, fn, g))
