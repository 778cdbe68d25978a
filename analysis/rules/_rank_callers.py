"""The project's other modules, seen from a rule of the rank family (DDP006, DDP009): a caller's
module as a minimal view for the ``flow/rank_kinds`` queries (``int_uses``, ``option_uses``,
``local_rank_env_reads``), and the modules that call the functions which declare an option."""
from __future__ import annotations

import ast

from ..semantic import parent


class CallerView:
    """What the ``flow/rank_kinds`` module queries read of a module (``sem``, ``tree``, a memo),
    plus its path and text for related locations, over a caller's read-only rule context."""

    def __init__(self, caller):
        self.sem = caller.sem
        self.tree = caller.sem.tree
        self.memo: dict = {}
        self.path = caller.filename
        self.text = caller.src.text


def caller_view(an, caller) -> CallerView:
    """One ``CallerView`` per caller module and check (kept on the check's flow analysis)."""
    memo = an.__dict__.setdefault("_rank_caller_views", {})
    got = memo.get(id(caller.sem))
    if got is None or got.sem is not caller.sem:
        got = memo[id(caller.sem)] = CallerView(caller)
    return got


def declaring_functions(sem, node: ast.AST) -> set[str]:
    """The module-level functions of ``sem``'s module that run ``node``: the one that holds it,
    and those that call one of them by name in this module (``parse_args`` -> ``_add_dist_args``)."""
    fn = sem.enclosing_function(node)
    while fn is not None and not isinstance(parent(fn), ast.Module):
        fn = sem.enclosing_function(fn)
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return set()
    tops = {f.name: f for f in sem.tree.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
    names = {fn.name}
    grew = True
    while grew:
        grew = False
        for name, f in tops.items():
            if name in names:
                continue
            if any(isinstance(c.func, ast.Name) and c.func.id in names for c in sem.scope_calls(f)):
                names.add(name)
                grew = True
    return names


def importer_views(ctx, an, node: ast.AST) -> list:
    """``CallerView`` of each module of the project (other files) that calls a function of this
    module running ``node`` (``declaring_functions``)."""
    from ._common import project_callers  # lazy: reads the project's other files

    names = declaring_functions(ctx.sem, node)
    if not names:
        return []
    out, seen = [], set()
    for caller, _call, _fn in project_callers(ctx, names):
        v = caller_view(an, caller)
        if id(v) not in seen:
            seen.add(id(v))
            out.append(v)
    return out


def _called_as(fn) -> str:
    """The name a call of ``fn`` spells: its class's for ``__init__`` (``Trainer(...)``)."""
    return parent(fn).name if fn.name == "__init__" and isinstance(parent(fn), ast.ClassDef) else fn.name


def _in_module_runners(ctx, an, fn, limit: int = 24) -> list:
    """``fn`` and the functions of this module that run it where every rank that runs them does:
    callers by name or through ``self.<method>(...)`` (as ``resolve_call`` resolves them), or that
    pass it to a project function that calls it (``rank.callback_calls``), whose
    call is behind no main-rank test of their own (``rank0_guarded(callers=False)``), transitively."""
    from ..flow.helper_calls import calls_named
    from ..flow.rank import callback_calls, rank0_guarded

    out, seen, i = [fn], {id(fn)}, 0
    while i < len(out) and len(out) < limit:
        g = out[i]
        i += 1
        for call in calls_named(ctx, _called_as(g)):  # ``f(...)``, ``x.f(...)``: the callee index
            res = an.resolve_call(an.main, call)
            if res is None or res[0] is not an.main or res[1] is not g:
                continue
            if rank0_guarded(ctx, call, callers=False) is True:
                continue
            h = ctx.sem.enclosing_function(call)
            if h is not None and id(h) not in seen:
                seen.add(id(h))
                out.append(h)
        for call in callback_calls(ctx, g):  # ``keep_last(args, remove_old)``: the helper calls it
            if rank0_guarded(ctx, call, callers=False) is True:
                continue
            h = ctx.sem.enclosing_function(call)
            if h is not None and id(h) not in seen:
                seen.add(id(h))
                out.append(h)
    return out


def every_rank_entry(ctx, node: ast.AST, depth: int = 0):
    """``(caller_ctx, call, callee)`` for a call, in a distributed script of the project (another file: it
    starts or joins the process group, wraps in DDP/FSDP or spawns its ranks), that runs ``node``
    on every rank: ``node`` is behind no main-rank test in its function; that function, or one of
    this module that runs it unguarded (``self.<method>(...)`` and calls by name, transitively), is
    called there (a module function, a class through its constructor, a method through an
    instance: ``t = Trainer(...); t.fit()``) with no main-rank test around the call, not in the
    launching process of an ``mp.spawn`` script. A function that tears the default group down
    after the call, behind no rank test (``tears_down_group_after``), is such a caller too, wherever
    it is called from. A caller in a library module of the project
    counts when that module's calling function is itself run so, a few modules deep
    (``save_checkpoint`` of ``utils/checkpoint.py``, called unguarded by ``Trainer.fit`` of
    ``engine/trainer.py``, which the script runs: ``Trainer(...).fit()``). None when no such call is
    found: a library module's code then says nothing of where it runs."""
    from ..flow import for_context
    from ..flow.models import is_distributed_script
    from ..flow.rank import rank0_guarded
    from ._common import project_callers
    from ._spawn import runs_in_ranks

    fn = ctx.sem.enclosing_function(node)
    if fn is None or rank0_guarded(ctx, node, callers=False) is True:
        return None

    def build():
        an = for_context(ctx)
        funcs = _in_module_runners(ctx, an, fn)
        ids = {id(g) for g in funcs}
        names = {_called_as(g) for g in funcs}
        later = []
        for caller, call, defn in project_callers(ctx, names):
            if id(defn) not in ids:
                continue
            if not is_distributed_script(caller) and not joins_group_before(caller, call):
                if tears_down_group_after(caller, call):
                    # its own teardown says every rank runs the function: its callers need not be seen
                    if rank0_guarded(caller, call, callers=False) is not True \
                            and runs_in_ranks(caller, call) is not False:
                        return caller, call, defn
                    continue
                later.append((caller, call))
                continue
            if rank0_guarded(caller, call) is not False or runs_in_ranks(caller, call) is False:
                continue
            return caller, call, defn
        if depth >= 2:
            return None
        for caller, call in later:  # a library module's function that runs it: who runs that one
            got = every_rank_entry(caller, call, depth + 1)
            # what the caller's check read is read by this check too (its cache entry depends on it)
            for dep in for_context(caller).dependencies():
                an._deps.setdefault(*dep)
            if got is not None:
                return got
        return None

    return ctx.memo(("rank_callers.every_rank_entry", id(fn), depth), build)


def joins_group_before(ctx, call: ast.Call) -> bool:
    """The function holding ``call`` starts (or joins) the default process group before it, itself
    or through a project function (``ddp, rank = setup_ddp()`` in ``main()`` of a script whose
    ``init_process_group`` lives in ``utils/dist.py``; ``flow.lifecycle.events``), on some path: when
    that run is distributed, every rank makes the call."""
    from ..flow import for_context
    from ..flow.lifecycle import events

    fn = ctx.sem.enclosing_function(call)
    if fn is None:
        return False
    an = for_context(ctx)
    at = (call.lineno, call.col_offset)
    return any(ev.kind == "init" and (ev.call.lineno, ev.call.col_offset) < at for ev in events(an, an.main, fn))


def tears_down_group_after(ctx, call: ast.Call) -> bool:
    """The function holding ``call`` itself destroys the default process group after it
    (``dist.destroy_process_group()``, also under a test that the group exists, ``if
    dist.is_initialized():``), behind no main-rank test and not in an ``except`` handler: every rank
    of a distributed run tears its own group down, so every rank runs that function, the call
    included, even when the group was started out of sight (LLaMA-Factory's
    ``_training_function``, whose group the transformers ``TrainingArguments`` start)."""
    from ..flow.lifecycle import DESTROY
    from ..flow.rank import rank0_guarded

    fn = ctx.sem.enclosing_function(call)
    if fn is None:
        return False
    at = (call.lineno, call.col_offset)
    for c in ctx.sem.scope_calls(fn):
        if (c.lineno, c.col_offset) <= at or ctx.sem.call_qualname(c) != DESTROY:
            continue
        if rank0_guarded(ctx, c, callers=False) is True \
                or any(isinstance(a, ast.ExceptHandler) for a in ctx.sem.ancestors(c)):
            continue
        return True
    return False
