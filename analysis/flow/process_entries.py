"""Functions that a process of their own starts with: the target of ``multiprocessing.Process(target=f)``
(``torch.multiprocessing``'s, or a start-method context's ``ctx.Process``) and the function that
``torch.multiprocessing.spawn(f)`` / ``start_processes(f)`` runs in each process, found by value flow
(``origins``: a name bound to one, a tuple unpacked, the cases of a pytest ``parametrize``).

A new process starts without a process group (a forked child's copy of its parent's group is no
group it can use): only what runs in it can create one. ``group_less_entry``: the function that
holds ``node`` is such an entry of this module, it is called nowhere in the module (nor handed to
another call than a starter), and no call of its body creates the default group, directly or
through project functions (``group_free.init_calls``): its processes never have a group. Several of
them run at once, so this is no single process (``group_free.without_group``); but they have no
rank, only the index their starter gave them, and no barrier."""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, get_arg, parent
from .origins import origins

# the starters: (position, keyword) of the function they run
_STARTERS = {"multiprocessing.Process": (1, "target"), "torch.multiprocessing.Process": (1, "target"),
             "torch.multiprocessing.spawn": (0, "fn"), "torch.multiprocessing.start_processes": (0, "fn")}
_CONTEXTS = frozenset(("multiprocessing.get_context", "torch.multiprocessing.get_context"))


def starter_target(hub, view, call: ast.Call):
    """The expression ``call`` starts new processes with, when it is a process starter; else None."""
    qn = view.sem.call_qualname(call) or ""
    got = _STARTERS.get(qn)
    if got is None and isinstance(call.func, ast.Attribute) and call.func.attr == "Process" and any(
            isinstance(e, ast.Call) and (v.sem.call_qualname(e) or "") in _CONTEXTS
            for v, e in origins(hub, view, call.func.value, call)):
        got = _STARTERS["multiprocessing.Process"]
    return None if got is None else get_arg(call, *got)


def process_entries(hub, view) -> frozenset:
    """ids of the functions of ``view``'s module that a process starter of the module starts."""
    memo = view.memo.setdefault("process_entries", {})
    got = memo.get("ids")
    if got is None:
        out = set()
        for c in view.sem.calls:
            t = starter_target(hub, view, c)
            if t is None:
                continue
            leaves = [(view, t)] if isinstance(t, ast.Name) and t.id in view.defs else origins(hub, view, t, c)
            for v, e in leaves:
                fn = v.defs.get(e.id) if v is view and isinstance(e, ast.Name) else None
                if isinstance(fn, FUNC_TYPES):
                    out.add(id(fn))
        got = memo["ids"] = frozenset(out)
    return got


def group_less_entry(hub, view, node: ast.AST) -> bool:
    """``node`` is in a module-level function that only process starters of its module run, and that
    creates no process group (see the module)."""
    from .group_free import init_calls

    fn = view.sem.enclosing_function(node)
    if not isinstance(fn, FUNC_TYPES) or not isinstance(parent(fn), ast.Module) or id(fn) not in process_entries(hub, view):
        return False
    if hub.call_sites(view, fn):
        return False  # also run in the calling process
    for c in view.sem.calls:
        args = (*c.args, *(k.value for k in c.keywords))
        if any(isinstance(a, ast.Name) and a.id == fn.name for a in args) and starter_target(hub, view, c) not in args:
            return False  # handed to another call: run who knows where
    return not init_calls(hub, view, fn, {})


def starts_group_processes(hub, views) -> ast.AST | None:
    """A ``multiprocessing.Process(target=f, ...)`` of one of ``views`` whose ``f`` (a function of
    that module) creates the process group (``for rank in range(n): args.local_rank = rank;
    Process(target=init, ...)``): the program starts its own ranks, as with ``mp.spawn``
    (``rank_kinds.self_launched``)."""
    from .group_free import init_calls

    for v in views:
        entries = process_entries(hub, v)
        if not entries:
            continue
        memo: dict = {}
        for fn in v.defs.values():
            if id(fn) in entries and init_calls(hub, v, fn, memo):
                return next((c for c in v.sem.calls if starter_target(hub, v, c) is not None), fn)
    return None


def one_node_elastic(hub, views) -> ast.AST | None:
    """An ``elastic_launch(config, entrypoint)`` of one of ``views`` whose every ``config`` is a
    ``LaunchConfig`` with ``max_nodes`` 1 (by value flow: a literal, a name, a parameter every caller
    fills, an argparse default): the job it starts has one node, so a local rank is the global rank
    (``rank_kinds.self_launched`` for ``mp.spawn``). None when some launch may span nodes."""
    from ..torch_api import ELASTIC_LAUNCH, LAUNCH_CONFIGS, const_int

    found = None
    for v in views:
        for c in v.sem.calls_to(*ELASTIC_LAUNCH):
            cfg_arg = get_arg(c, 0, "config")
            cfgs = origins(hub, v, cfg_arg, c, frames=()) if cfg_arg is not None else []
            if not cfgs:
                return None
            for cv, cfg, fr in cfgs:
                if not (isinstance(cfg, ast.Call) and (cv.sem.call_qualname(cfg) or "") in LAUNCH_CONFIGS):
                    return None
                n = get_arg(cfg, 1, "max_nodes")
                # (in the frames of the helper call that built it: ``one_machine(4)``'s ``nodes=1``)
                leaves = [x[:2] for x in origins(hub, cv, n, cfg, frames=fr)] if n is not None else []
                if not leaves or any(const_int(e, lv.sem) != 1 for lv, e in leaves):
                    return None
            found = found or c
    return found
