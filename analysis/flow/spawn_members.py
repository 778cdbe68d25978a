"""A spawner that starts ``nprocs`` workers and then runs the worker itself as one more member.

``torch.multiprocessing.spawn`` / ``start_processes`` numbers its children from 0; a launcher
that keeps a member in the parent (so that signals reach it) calls the worker function itself
after starting the others (``spawn(run, (cfg,), nprocs=n, join=False)`` ... ``run(-1, cfg)``).
The group then has ``nprocs + 1`` members, and ``nprocs`` must be the world size minus one.

``parent_joined_spawns(hub, view)`` lists ``Joined`` records for the checked file: a spawn call
with ``join=False`` (the parent goes on while the children run) whose ``nprocs`` (or an operand of ``min(...)`` there) is the very setting that the worker passes
to ``init_process_group(world_size=...)`` (directly or through project helpers, in this module or
another), reached through the object the spawner hands to both the children (``args=``) and its
own call of the worker. The parent's call runs after the spawn on its path (``_follows``: not in
the other branch of an ``if``), in the spawn's function or, when a helper of this module spawns,
in its caller after the call (access paths translated through the call's arguments). The worker
may be a method (``trainer.member``: the same reference on the same object when the spawner
cannot name the class). Values are compared as *access paths*: a root (a parameter, or the one
binding of a local name) and the attributes read from it, followed through names bound once
(``dcfg = cfg.distributed``, also by position in a tuple assignment) and through the arguments of
the calls that lead from the worker to the initialisation; a parameter rebound (on some path)
from a call whose one argument is itself (``cfg = to_config(cfg)``) still reads its own
settings. Nothing here reports a finding.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, get_arg, param_names, parent
from ..torch_api import SPAWNS
from .bindings import reaching
from .calls import call_args, reference_call, self_offset

INIT = "torch.distributed.init_process_group"
_MAX_DEPTH = 4


class Joined:
    """``spawn`` starts the workers with ``nprocs`` given by ``part`` (the whole argument, or an
    operand of ``min``); ``direct`` is the parent's own call of the worker; ``init`` is
    ``(view, call)`` of the ``init_process_group`` whose ``world_size`` ``part`` equals."""

    __slots__ = ("spawn", "part", "direct", "init", "worker")

    def __init__(self, spawn, part, direct, init, worker):
        self.spawn, self.part, self.direct, self.init, self.worker = spawn, part, direct, init, worker


def access_path(view, expr, at, depth: int = 0):
    """``(root, attrs)`` of a name or attribute chain: ``root`` is ``("param", function, name)``
    or ``("bind", binding node, name)``; None for anything else (a call, arithmetic)."""
    if depth > 8:
        return None
    if isinstance(expr, ast.Attribute):
        got = access_path(view, expr.value, at, depth + 1)
        return None if got is None else (got[0], (*got[1], expr.attr))
    if not isinstance(expr, ast.Name):
        return None
    kind, x = reaching(view, expr.id, at)
    if kind == "param":
        return ("param", x, expr.id), ()
    if kind in ("events", "events+param") and x and all(_converts_itself(ev, expr.id) for ev in x):
        fn = view.sem.enclosing_function(x[0])
        if fn is not None and expr.id in param_names(fn):
            return ("param", fn, expr.id), ()  # ``cfg = to_config(cfg)``: the parameter's own settings
    if kind != "events" or not x or len(x) != 1:
        return None
    ev = x[0]
    if isinstance(ev, ast.Assign) and len(ev.targets) == 1:
        value = _element(ev.targets[0], ev.value, expr.id)
        if isinstance(value, (ast.Name, ast.Attribute)):
            return access_path(view, value, ev, depth + 1)
    if isinstance(ev, (ast.Assign, ast.AnnAssign)):
        return ("bind", ev, expr.id), ()
    return None


def _converts_itself(ev, name: str) -> bool:
    """``name = f(name)``: the name rebound from a call whose one argument is the name itself
    (a conversion of the same settings object)."""
    return isinstance(ev, ast.Assign) and len(ev.targets) == 1 and isinstance(ev.targets[0], ast.Name) \
        and ev.targets[0].id == name and isinstance(ev.value, ast.Call) and not ev.value.keywords \
        and len(ev.value.args) == 1 and isinstance(ev.value.args[0], ast.Name) and ev.value.args[0].id == name


def _element(target, value, name: str):
    """The part of ``value`` that ``target`` binds to ``name`` (by position in tuples)."""
    if isinstance(target, ast.Name):
        return value if target.id == name else None
    if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)) \
            and len(target.elts) == len(value.elts) \
            and not any(isinstance(e, ast.Starred) for e in (*target.elts, *value.elts)):
        for t, v in zip(target.elts, value.elts):
            got = _element(t, v, name)
            if got is not None:
                return got
    return None


def _body_calls(fn):
    """The calls of ``fn``'s own body (not of nested functions or classes)."""
    todo = list(fn.body)
    while todo:
        n = todo.pop()
        if isinstance(n, (*FUNC_TYPES, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(n, ast.Call):
            yield n
        todo.extend(ast.iter_child_nodes(n))


def world_paths(hub, view, fn, depth: int = 0, seen=None) -> list:
    """``(param, attrs, (view, init call))``: ``fn`` (or a project function it calls, followed
    through the arguments of each call) initialises the group with ``world_size`` read as
    ``attrs`` from its parameter ``param``."""
    if depth > _MAX_DEPTH:
        return []
    seen = set() if seen is None else seen
    if id(fn) in seen:
        return []
    seen.add(id(fn))
    out = []
    for c in _body_calls(fn):
        if (view.sem.call_qualname(c) or "") == INIT:
            ws = get_arg(c, 3, "world_size")
            got = access_path(view, ws, c) if ws is not None else None
            if got is not None and got[0][0] == "param" and got[0][1] is fn:
                out.append((got[0][2], got[1], (view, c)))
            continue
        try:
            res = hub.resolve_call(view, c)
        except Exception:  # noqa: BLE001 - unresolvable: not followed
            res = None
        if res is None or not isinstance(res[1], FUNC_TYPES) or res[1] is fn:
            continue
        hv, h = res
        args = dict(call_args(c, h))
        for p, attrs, init in world_paths(hub, hv, h, depth + 1, seen):
            a = args.get(p)
            got = access_path(view, a, c) if a is not None else None
            if got is not None and got[0][0] == "param" and got[0][1] is fn:
                out.append((got[0][2], (*got[1], *attrs), init))
    return out


def _after_in(view, spawn):
    """The calls of ``spawn``'s function (or module) that run after it on its path."""
    fn = view.sem.enclosing_function(spawn)
    nodes = _body_calls(fn) if fn is not None else (
        n for n in view.sem.of_types(ast.Call) if view.sem.enclosing_function(n) is None)
    return [c for c in nodes if _follows(spawn, c)]


def _stmts_up(node):
    """(statement, the list of statements holding it) from ``node`` up to its function."""
    n = node
    while n is not None and not isinstance(n, (*FUNC_TYPES, ast.Lambda, ast.ClassDef, ast.Module)):
        p = parent(n)
        if isinstance(n, ast.stmt) and p is not None:
            for field in ("body", "orelse", "finalbody", "handlers"):
                blk = getattr(p, field, None)
                if isinstance(blk, list) and any(x is n for x in blk):
                    yield n, blk
                    break
        n = p


def _follows(a, b) -> bool:
    """``b`` runs after ``a`` whenever ``a`` ran: a statement holding ``b`` comes later in a
    block that holds ``a`` (not in the other branch of an ``if``, nor in an ``except``)."""
    up_b = list(_stmts_up(b))
    for sa, blk in _stmts_up(a):
        i = next(k for k, x in enumerate(blk) if x is sa)
        for sb, blk_b in up_b:
            if blk_b is blk and next(k for k, x in enumerate(blk) if x is sb) > i:
                return True
    return False


def _resolved(hub, view, call):
    try:
        res = hub.resolve_call(view, call)
    except Exception:  # noqa: BLE001 - unresolvable: not followed
        return None
    return res if res is not None and isinstance(res[1], FUNC_TYPES) else None


def _spawn_target(hub, view, sp, ref):
    """(view, function) that ``spawn(ref, ...)`` starts: ``ref`` resolved as a call of it (else
    None: then the parent's call must read the same reference, ``trainer.member`` of the very
    object the spawner was given)."""
    probe = view.memo.setdefault("spawn_members.probes", {}).get(sp)
    if probe is None:
        probe = view.memo["spawn_members.probes"][sp] = reference_call(ref, sp)
    return _resolved(hub, view, probe)


def _contexts(hub, view, sp):
    """(calls that run after the spawn, translate): in the spawn's own function, and after each
    call of that function in this module (``translate`` maps an access path of the spawner to
    the caller's, through the call's arguments; None when it reads a local of the spawner)."""
    yield _after_in(view, sp), (lambda path: path)
    fn = view.sem.enclosing_function(sp)
    if fn is None:
        return
    for c in hub.call_sites(view, fn):
        args = dict(call_args(c, fn))

        def translate(path, c=c, args=args):
            root, attrs = path
            if root[0] != "param" or root[1] is not fn or root[2] not in args:
                return None
            got = access_path(view, args[root[2]], c)
            return None if got is None else (got[0], (*got[1], *attrs))
        yield _after_in(view, c), translate


def _is_false(hub, view, expr, at) -> bool:
    """``expr`` is ``False`` wherever its value may come from (a literal, or through names,
    attribute stores, argparse defaults and config entries: ``flow.origins``)."""
    if expr is None:
        return False
    if isinstance(expr, ast.Constant):
        return expr.value is False
    from .origins import origins  # lazy: spawn_members stays below origins in the layering

    outs = origins(hub, view, expr, at)
    return bool(outs) and all(isinstance(e, ast.Constant) and e.value is False for _, e in outs)


def parent_joined_spawns(hub, view) -> list:
    out = []
    for sp in view.sem.calls_to(*SPAWNS):
        ref = get_arg(sp, 0, "fn")
        args = get_arg(sp, 1, "args")
        nprocs = get_arg(sp, 2, "nprocs")
        join = get_arg(sp, 3, "join")
        if ref is None or nprocs is None or not isinstance(args, ast.Tuple) \
                or any(isinstance(e, ast.Starred) for e in args.elts) \
                or not _is_false(hub, view, join, sp):
            continue  # (``join=False``: the parent runs on while the children do)
        target = _spawn_target(hub, view, sp, ref)
        ref_path = access_path(view, ref, sp)
        if target is None and ref_path is None:
            continue
        parts = nprocs.args if isinstance(nprocs, ast.Call) and isinstance(nprocs.func, ast.Name) \
            and nprocs.func.id == "min" and not view.sem.assignments(view.tree).get("min") else [nprocs]
        got = None
        for calls, translate in _contexts(hub, view, sp):
            for dc in calls:
                res = _resolved(hub, view, dc)
                if res is None:
                    continue
                if target is not None and res[1] is not target[1]:
                    continue
                if target is None and (translate(ref_path) is None
                                       or access_path(view, dc.func, dc) != translate(ref_path)):
                    continue  # ``trainer.member`` of the spawner's parameter: the caller's same object
                got = _joined(hub, view, sp, args, parts, dc, *res, translate)
                if got is not None:
                    break
            if got is not None:
                out.append(got)
                break
    return out


def _joined(hub, view, sp, args, parts, dc, wv, worker, translate):
    a = worker.args
    pos = [x.arg for x in (*a.posonlyargs, *a.args)][self_offset(worker):]
    if not pos or len(pos) - len(a.defaults) > len(args.elts) + 1 or len(pos) < len(args.elts) + 1:
        return None  # a worker the spawn call does not fit
    direct = dict(call_args(dc, worker))
    for p, attrs, init in world_paths(hub, wv, worker):
        if p not in direct or p == pos[0] or p not in pos:
            continue
        sent = access_path(view, args.elts[pos.index(p) - 1], sp)
        mine = access_path(view, direct[p], dc)
        if mine is None or sent is None or translate(sent) != mine:
            continue  # the children and the parent do not get one object
        world = (mine[0], (*mine[1], *attrs))
        for part in parts:
            got = access_path(view, part, sp)
            if got is not None and translate(got) == world:
                return Joined(sp, part, dc, init, worker)
    return None
