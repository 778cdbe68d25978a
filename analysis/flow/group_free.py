"""A program path that never has a process group: ``node`` and every init of the default group
(``init_process_group``, a library that makes one, directly or through project functions) sit in
exclusive branches of one ``if``, in the function holding ``node`` and in every function of the
file that leads to it.

A command-line program that dispatches on its subcommand (``if cmd == "train": train() elif cmd
== "export": export()``) creates the group only on the ``train`` side; what ``export`` runs is a
single process's work, whichever launcher ran the program: no init before it, none after it on
the same run. The answer is ``True`` only when the chain of callers ends at a function no function
of the file calls, and an init was found on the way (the program makes its own group, so it is not
handed one by a caller); any doubt (an init on the same path, before or after ``node``; a loop
around the dispatching ``if``; a call site that is not a plain call by name) answers ``False``.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, parent
from ..torch_api import DDP_CLASS, SPAWNS
from .exclusive import exclusive
from .lifecycle import INIT, LIBRARY_INITS, init_sites, library_init_sites, project_target

_INITS = LIBRARY_INITS | {INIT}


def without_group(ctx, node: ast.AST) -> bool:
    """``node`` runs only on program paths that never create the default group (see the module)."""
    from . import for_context

    hub = for_context(ctx)
    found = [False]
    memo = ctx.memo("group_free.scopes", dict)
    return _free(ctx, hub, node, 0, memo, found) and found[0]


def _free(ctx, hub, node, depth, memo, found) -> bool:
    if depth > 4:
        return False
    sem = ctx.sem
    fn = sem.enclosing_function(node)
    if fn is not None and (isinstance(fn, ast.Lambda) or isinstance(parent(fn), ast.ClassDef)):
        return False  # a lambda, a method: its callers are not read here
    scope = fn if fn is not None else sem.tree
    for c in init_calls(hub, hub.main, scope, memo):
        if c is node:
            continue  # the call on the way: its own inits were read inside it
        if not exclusive(c, node, scope):
            return False
        found[0] = True
    if fn is None:
        return True  # the module's top level: where the program starts
    sites = [c for c in sem.calls if c.func.__class__ is ast.Name and c.func.id == fn.name
             and sem.scope_of(c) is not fn]
    if any(a.__class__ is ast.Name and a.id == fn.name
           for c in sem.calls for a in (*c.args, *(k.value for k in c.keywords))):
        return False  # passed as a value (``mp.spawn(fn)``, a callback): run who knows where
    return all(_free(ctx, hub, site, depth + 1, memo, found) for site in sites)


def init_calls(hub, view, fn, memo) -> list:
    """The calls of ``fn``'s own body that create the default group, directly or through project
    functions (``lifecycle.init_sites`` / ``library_init_sites``)."""
    if id(fn) in memo:
        return memo[id(fn)]
    out = []
    for c in view.sem.scope_calls(fn) or ():
        qn = view.sem.call_qualname(c) or ""
        if qn in _INITS:
            out.append(c)
        elif not qn.startswith("torch."):
            target = project_target(hub, view, c)
            if target is not None and target[1] is not fn and (
                    init_sites(hub, *target, depth=1) or library_init_sites(hub, *target, depth=1)):
                out.append(c)
    memo[id(fn)] = out
    return out


# the modules through which a program may make processes that share work: torch's own, the
# launchers and trainers that make a group or wrap a model for one, the message-passing libraries
_DIST_MODULES = ("torch.distributed", "torch.nn.parallel.distributed", "torch.nn.parallel.DistributedDataParallel",
                 "torch.multiprocessing.spawn", "torch.multiprocessing.start_processes", "accelerate", "deepspeed",
                 "horovod", "colossalai", "lightning", "pytorch_lightning", "lightning_fabric", "fairscale",
                 "mpi4py", "ray", "torch_xla", "apex", "megatron", "composer", "transformers.Trainer",
                 "transformers.trainer", "submitit", "torch.utils.data.distributed",
                 "torch.utils.data.DistributedSampler")


_MAX_PROGRAM = 160  # modules read for the answer (past it: not known)


def _dist_name(q: str) -> bool:
    return any(q == m or q.startswith(m + ".") for m in _DIST_MODULES)


def program_without_group(hub, view) -> bool:
    """Nothing in the program that ``view`` starts can make processes that share work. Its own code
    names no distributed module (``import torch.distributed as dist``, ``from torch.nn.parallel
    import DistributedDataParallel``, ``import accelerate``, a call through ``import torch`` such as
    ``torch.distributed.init_process_group`` or ``torch.multiprocessing.spawn``), and either

    - no project module it imports (``rank_kinds.program_views``, at most ``_MAX_PROGRAM``: a
      program past it is not known) names one either; or
    - although modules of the package it imports have distributed code (a single-process script
      beside the package's DDP trainer), neither its top level nor any of its functions and methods
      calls, directly or through the project functions and methods it calls (``call_sites.sites``,
      a few calls deep), an init of the default group, a spawn of processes, a DDP / FSDP wrap, or
      anything of a library that makes processes its own way (Accelerate, DeepSpeed, Lightning,
      Ray, HF's ``Trainer``...: ``_DIST_MODULES`` but torch's).

    Such a program is one process with its own data, or several that never meet (a launcher that
    starts N copies of it runs N separate jobs): no replica exists that another rank's value could
    drift from. Not known (False) when a module was refused for the budget during the check.
    (Callers in other files, which may run the module's functions in a distributed program of
    theirs, are the caller's question.)"""
    from .call_sites import sites
    from .rank_kinds import program_views

    memo = view.memo
    if "group_free.program_without" in memo:
        return memo["group_free.program_without"]
    memo["group_free.program_without"] = False
    if _distribution_named(view):
        return False  # (the usual answer, without reading the program's other modules)
    sem = view.sem
    starts = any(sites(hub, view, scope, _STARTS, instances=True, prefixes=_LIBRARIES)
                 for scope in (sem.tree, *(f for fns in sem.functions.values() for f in fns)))
    if hub.truncated:
        return False  # a module on a call path may be unread
    if starts:
        views = program_views(hub, view, _MAX_PROGRAM)
        if len(views) >= _MAX_PROGRAM or hub.truncated or any(_distribution_named(v) for v in views):
            return False
    memo["group_free.program_without"] = True
    return True


def _distribution_named(v) -> bool:
    memo = v.memo
    got = memo.get("group_free.dist_names")
    if got is None:
        got = memo["group_free.dist_names"] = _names_distribution(v)
    return got


def _names_distribution(v) -> bool:
    sem = v.sem
    for st in sem.imports:  # every import statement of the module, in functions too
        if st.__class__ is ast.Import:
            if any(_dist_name(a.name) for a in st.names):
                return True
        elif st.level == 0 and (_dist_name(st.module or "")
                                or any(_dist_name(f"{st.module or ''}.{a.name}") for a in st.names)):
            return True
    return any(_dist_name(sem.call_qualname(c) or "") for c in sem.calls)


def program_caller_without_group(hub, view, call: ast.Call) -> bool:
    """``call`` sits in a module-level function of ``view`` that the module's own top level runs
    (a program's ``main()``, under ``if __name__ == "__main__":`` or not), nowhere else in the
    module, and nothing the module runs creates the default group (no init in its top level nor in
    any of its functions, directly or through project functions): a DDP wrapper, which needs that
    group to be built, cannot exist in that run. (Callers of the function in other modules are the
    asker's question.)"""
    sem = view.sem
    fn = sem.enclosing_function(call)
    if not isinstance(fn, FUNC_TYPES) or not isinstance(parent(fn), ast.Module):
        return False
    memo: dict = {}
    scopes = [sem.tree, *(n for n in sem.tree.body if isinstance(n, FUNC_TYPES)),
              *(m for c in sem.tree.body if isinstance(c, ast.ClassDef) for m in c.body if isinstance(m, FUNC_TYPES))]
    if any(init_calls(hub, view, s, memo) for s in scopes):
        return False
    runs = [c for c in sem.calls if isinstance(c.func, ast.Name) and c.func.id == fn.name]
    return bool(runs) and all(sem.enclosing_function(c) is None for c in runs)


# what starts processes that share work in a program that names only torch's own distributed
# modules: the default group's inits (``init_process_group``, a library's), a spawn of processes, a
# model wrapped for a group
_STARTS = frozenset({*_INITS, *SPAWNS, DDP_CLASS, "torch.distributed.fsdp.FullyShardedDataParallel",
                     "torch.distributed.fsdp.fully_shard", "torch.distributed._composable.fsdp.fully_shard"})


# the libraries of ``_DIST_MODULES`` that make processes or a group their own way (not torch's)
_LIBRARIES = tuple(m + "." for m in _DIST_MODULES if not m.startswith("torch."))
