from __future__ import annotations

import ast

import os

from ..model import Severity
from ..registry import NoCase, Rule
from ..semantic import FUNC_TYPES, get_arg, param_names, parent
from ..flow.assignments import reaching_assignment
from ..flow.models import LAUNCH_TEXT, is_distributed_script
from ..flow.rank import rank0_guarded
from ..flow.rank_tests import is_rank_like
from ._spawn import runs_in_ranks

_BUFFERS = ("io.BytesIO", "io.StringIO", "tempfile.TemporaryFile", "tempfile.NamedTemporaryFile",
            "tempfile.SpooledTemporaryFile")


class SaveOnEveryRank(Rule):
    """
    ## What it does
    Checks for `torch.save(obj, path)` in a distributed script (one that calls
    `init_process_group`, wraps in DDP/FSDP or spawns its ranks) that is not under a rank-0 guard
    and writes to a path that does not depend on the rank.

    Guards are recognised as `if rank == 0:`, `if dist.get_rank() == 0:`,
    `if args.local_rank in [-1, 0]:`, `if master_process:`, `if is_main_process():` (and
    helpers of the file that return such a test), `if not distributed or rank == 0:`, the `else`
    of `if rank != 0:`, an early `if rank != 0: return`, a test that the world has one process
    (`if dist.get_world_size() != 1: raise ...`, `WORLD_SIZE` from the environment, read by value
    flow, not by name), decorators such as `@rank_zero_only`, and a
    function whose every call in the file is guarded. A save in a function this file never calls,
    or in the launching process of an `mp.spawn` script, is not flagged; nor is a per-item output
    whose path comes from a loop over this rank's share of the work (`for p in
    paths[rank::world_size]`, a loader with a `DistributedSampler`, and inner loops over its
    batches): each rank writes different files.

    A call, on every rank, of a save helper from another file of the project
    (`save_checkpoint(state, args.output_dir)` from `utils/checkpoint.py`) is flagged at the call
    when the helper runs its `torch.save` unconditionally (no `if`, no early `return`, no decorator)
    on a path made only of its parameters, and none of the arguments given for them is
    rank-specific. Helpers that guard themselves (`save_on_master`) stay silent.

    ## Why is this bad?
    Every rank runs the line, so N processes open, truncate and write the same file at the same
    time. The result is a corrupt or truncated checkpoint that fails to load later:

    ```
    RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory
    ```

    and on shared file systems the writes also slow every rank down.

    ## Example
    ```python
    dist.init_process_group("nccl")
    ...
    torch.save(model.module.state_dict(), "checkpoint.pt")
    ```

    ## Use instead
    ```python
    if dist.get_rank() == 0:
        torch.save(model.module.state_dict(), "checkpoint.pt")
    dist.barrier()  # before other ranks read it
    ```

    ## Fix safety
    There is no fix: where the guard belongs (and whether the other ranks must wait with a
    `barrier()`) depends on the script.
    """

    code = "DDP202"
    name = "save-on-every-rank"
    severity = Severity.WARNING
    requires_text = (NoCase("save"), NoCase("checkpoint"), NoCase("ckpt"))  # torch.save, or a save helper
    requires_text_all = (LAUNCH_TEXT,)  # is_distributed_script: a launch call is spelled in the file

    def finish(self, ctx) -> None:
        if not is_distributed_script(ctx):
            return
        self._through_helpers(ctx)
        saves = ctx.calls_to("torch.save")
        for call in saves:
            path = get_arg(call, 1, "f")
            if path is None:
                continue
            # every test must let the save through: the usual deciding one (a save under a rank-0
            # guard) first, the walks over the path's bindings after
            if rank0_guarded(ctx, call) is not False:
                continue
            if rank_specific_path(ctx, path, call) or per_item_path(ctx, path, call):
                continue
            if runs_in_ranks(ctx, call) is False:
                continue
            ctx.report(
                call,
                "`torch.save` runs on every rank and writes the same path: concurrent writers corrupt "
                "the checkpoint; guard it with `if rank == 0:` (or make the path rank-specific)",
            )

    def _through_helpers(self, ctx) -> None:
        """A call, on every rank, of a save helper of another project file (``save_checkpoint(state,
        args.output_dir)``) whose ``torch.save`` runs unguarded on a path made only of its
        parameters, none of them rank-specific at this call."""
        from ..flow import for_context  # lazy: only scripts that call project helpers load them
        from ..flow.helper_calls import bind_args

        from ..flow.helper_calls import calls_named_if

        ana = None
        # the gate of this rule: a helper that saves says so in its name (asked once per name)
        for call in calls_named_if(ctx, _save_like):
            f = call.func
            name = f.id if f.__class__ is ast.Name else f.attr
            if (ctx.qn(call) or "").startswith("torch."):
                continue
            if ana is None:
                ana = for_context(ctx)
            got = ana.resolve_call(ana.main, call)
            if got is None or got[0] is ana.main:
                continue  # the same file: its torch.save is checked where it is
            view, fn = got
            found = _unguarded_save(view, fn)
            if found is None:
                continue
            save, params = found
            if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
                continue  # ``*args``/``**kwargs``: which parameter gets what is not known here
            args = bind_args(call, fn)
            if any(p not in args and p not in _defaults(fn) for p in params):
                continue
            used = [args[p] for p in params if p in args]
            if any(rank_specific_path(ctx, a, call) or per_item_path(ctx, a, call) for a in used):
                continue
            if runs_in_ranks(ctx, call) is False or rank0_guarded(ctx, call) is not False:
                continue
            from ..flow.findings import node_span

            rng = node_span(ctx, view.path, save)
            ctx.report(
                call,
                f"`{name}()` runs on every rank, and its `torch.save` ({os.path.basename(view.path or '')} "
                f"line {save.lineno}) writes the same path from every rank: concurrent writers corrupt the "
                "checkpoint; call it under `if rank == 0:`",
                related=[("file", view.path, rng, "the torch.save every rank runs")] if view.path else (),
            )


def _save_like(name: str) -> bool:
    low = name.lower()
    return "save" in low or "checkpoint" in low or "ckpt" in low


_SAMPLERS = ("torch.utils.data.DistributedSampler", "torch.utils.data.distributed.DistributedSampler")
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def per_item_path(ctx, path: ast.AST, call: ast.Call) -> bool:
    """The path names an item of this rank's share of the work: it mentions a variable bound by an
    enclosing ``for`` over a rank-split list (``paths[rank::world_size]``) or over a loader with a
    ``DistributedSampler`` (also through ``enumerate``/``zip`` and inner loops over the batch, and
    plain assignments inside those loops). Each rank then writes its own files."""
    sem = ctx.sem
    loops = []
    for a in sem.ancestors(call):
        if isinstance(a, _FUNCS):
            break
        if isinstance(a, (ast.For, ast.AsyncFor)):
            loops.append(a)
    if not loops:
        return False
    tainted: set[str] = set()
    for loop in reversed(loops):  # outermost first
        if _sharded(ctx, loop.iter, loop, 0) or _names(loop.iter) & tainted:
            tainted |= _names(loop.target)
            # plain assignments in the loop body that derive from the item
            for st in sorted((n for n in ast.walk(loop) if isinstance(n, (ast.Assign, ast.AnnAssign))
                              and n.value is not None), key=lambda n: n.lineno):
                if _names(st.value) & tainted:
                    for t in (st.targets if isinstance(st, ast.Assign) else [st.target]):
                        tainted |= _names(t)
    if not tainted:
        return False
    names = _names(path)
    if isinstance(path, ast.Name):
        st = reaching_assignment(ctx, path.id, call)
        if st is not None:
            names |= _names(st.value)
    return bool(names & tainted)


def _names(e: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(e) if isinstance(n, ast.Name)}


def _sharded(ctx, e: ast.AST, at: ast.AST, depth: int) -> bool:
    if depth > 3 or e is None:
        return False
    for n in ast.walk(e):
        if isinstance(n, ast.Subscript) and any(is_rank_like(x) for x in ast.walk(n.slice)
                                                 if isinstance(x, (ast.Name, ast.Attribute, ast.Call))):
            return True  # paths[rank::world_size], chunks[rank]
        if isinstance(n, ast.Call):
            if (ctx.qn(n) or "") in _SAMPLERS:
                return True
            for k in n.keywords:
                if k.arg == "sampler" and _sharded(ctx, k.value, at, depth + 1):
                    return True
        if isinstance(n, ast.Name) and depth < 3:
            st = reaching_assignment(ctx, n.id, at)
            if st is not None and _sharded(ctx, st.value, st, depth + 1):
                return True
    return False


def rank_specific_path(ctx, expr: ast.AST, at: ast.AST, depth: int = 0, buffers: bool = True) -> bool:
    """The path (or file object) ``expr`` is this rank's own: it is made of the rank
    (``f"ckpt_{rank}.pt"``), or (``buffers``) it is an in-memory buffer (``io.BytesIO()``)."""
    if depth > 3:
        return buffers
    for n in ast.walk(expr):
        if isinstance(n, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)) and is_rank_like(n):
            return True
        if buffers and isinstance(n, ast.Call) and (ctx.qn(n) or "") in _BUFFERS:
            return True
        if isinstance(n, ast.Name) and n is not expr and depth < 3:
            st = reaching_assignment(ctx, n.id, at)
            if st is not None and rank_specific_path(ctx, st.value, st, depth + 1, buffers):
                return True
    if isinstance(expr, ast.Name):
        st = reaching_assignment(ctx, expr.id, at)
        if st is not None:
            return rank_specific_path(ctx, st.value, st, depth + 1, buffers)
        # bound by `with open(...) as f` / `with io.BytesIO() as f` / a loop: look at the binding
        scope = ctx.sem.scope_of(at)
        for b in ctx.sem.assignments(scope).get(expr.id, ()):
            if isinstance(b, (ast.With, ast.AsyncWith)):
                for item in b.items:
                    if rank_specific_path(ctx, item.context_expr, b, depth + 1, buffers):
                        return True
    return False


_PATH_CALLS = frozenset({"os.path.join", "str", "os.fspath", "pathlib.Path", "Path", "format"})


def _unguarded_save(view, fn):
    """(the torch.save call, the parameters its path is made of) when ``fn`` runs a ``torch.save``
    on every call: not decorated, not under an ``if``/loop, no early exit before it, and a path
    built only from parameters and constants. None otherwise (cannot tell)."""
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or fn.decorator_list:
        return None
    memo = view.memo.setdefault("ddp202.unguarded", {})
    if id(fn) in memo:
        return memo[id(fn)]
    memo[id(fn)] = None
    sem = view.sem
    params = set(param_names(fn))
    for save in sem.calls_to("torch.save"):
        if sem.enclosing_function(save) is not fn:
            continue
        top, child, p = None, save, parent(save)
        ok = True
        while p is not None and p is not fn:
            if isinstance(p, (ast.If, ast.IfExp, ast.For, ast.AsyncFor, ast.While, *FUNC_TYPES, ast.Lambda)) or (
                    isinstance(p, ast.Try) and child not in p.body):
                ok = False
                break
            child, p = p, parent(p)
        top = child
        if not ok or top not in fn.body:
            continue
        before = fn.body[: fn.body.index(top)]
        if any(isinstance(n, (ast.Return, ast.Raise)) for st in before for n in ast.walk(st)):
            continue  # `if not is_main_process(): return` and the like
        path = get_arg(save, 1, "f")
        used = _path_params(sem, path, fn, params, 0)
        if used is None:
            continue
        memo[id(fn)] = (save, used)
        break
    return memo[id(fn)]


def _path_params(sem, e, fn, params: set[str], depth: int) -> set[str] | None:
    """The parameters ``e`` is built from (constants, f-strings, os.path.join...); None when it uses
    anything else (a rank, a global, an unknown call)."""
    if e is None or depth > 3:
        return None
    out: set[str] = set()
    for n in ast.walk(e):
        if isinstance(n, ast.Call):
            qn = sem.call_qualname(n) or (n.func.id if isinstance(n.func, ast.Name) else None)
            if qn not in _PATH_CALLS and not (isinstance(n.func, ast.Attribute) and n.func.attr in ("format", "joinpath")):
                return None
        elif isinstance(n, ast.Name):
            if is_rank_like(n):
                return None
            if n.id in params:
                out.add(n.id)
            elif n.id in ("os", "str", "Path", "pathlib"):
                continue
            else:
                v = sem.single_value(n.id, fn)
                if v is None:
                    return None
                sub = _path_params(sem, v, fn, params, depth + 1)
                if sub is None:
                    return None
                out |= sub
        elif isinstance(n, ast.Attribute) and is_rank_like(n):
            return None
    return out


def _defaults(fn) -> set[str]:
    a = fn.args
    pos = [x.arg for x in (*a.posonlyargs, *a.args)]
    names = set(pos[len(pos) - len(a.defaults):]) if a.defaults else set()
    names |= {k.arg for k, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None}
    return names
