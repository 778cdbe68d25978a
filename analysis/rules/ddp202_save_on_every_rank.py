from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import get_arg
from ._model_flow import LAUNCH_TEXT, is_distributed_script, reaching_assignment
from ._rank0 import is_rank_like, rank0_guarded
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
    of `if rank != 0:`, an early `if rank != 0: return`, decorators such as `@rank_zero_only`, and a
    function whose every call in the file is guarded. A save in a function this file never calls,
    or in the launching process of an `mp.spawn` script, is not flagged; nor is a per-item output
    whose path comes from a loop over this rank's share of the work (`for p in
    paths[rank::world_size]`, a loader with a `DistributedSampler`, and inner loops over its
    batches): each rank writes different files.

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
    requires_text = ("save",)
    requires_text_all = (LAUNCH_TEXT,)  # is_distributed_script: a launch call is spelled in the file

    def finish(self, ctx) -> None:
        saves = ctx.calls_to("torch.save")
        if not saves or not is_distributed_script(ctx):
            return
        for call in saves:
            path = get_arg(call, 1, "f")
            if path is None or rank_specific_path(ctx, path, call) or per_item_path(ctx, path, call):
                continue
            if runs_in_ranks(ctx, call) is False:
                continue
            if rank0_guarded(ctx, call) is not False:
                continue
            ctx.report(
                call,
                "`torch.save` runs on every rank and writes the same path: concurrent writers corrupt "
                "the checkpoint; guard it with `if rank == 0:` (or make the path rank-specific)",
            )


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


def rank_specific_path(ctx, expr: ast.AST, at: ast.AST, depth: int = 0) -> bool:
    if depth > 3:
        return True
    for n in ast.walk(expr):
        if isinstance(n, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)) and is_rank_like(n):
            return True
        if isinstance(n, ast.Call) and (ctx.qn(n) or "") in _BUFFERS:
            return True
        if isinstance(n, ast.Name) and n is not expr and depth < 3:
            st = reaching_assignment(ctx, n.id, at)
            if st is not None and rank_specific_path(ctx, st.value, st, depth + 1):
                return True
    if isinstance(expr, ast.Name):
        st = reaching_assignment(ctx, expr.id, at)
        if st is not None:
            return rank_specific_path(ctx, st.value, st, depth + 1)
        # bound by `with open(...) as f` / `with io.BytesIO() as f` / a loop: look at the binding
        scope = ctx.sem.scope_of(at)
        for b in ctx.sem.assignments(scope).get(expr.id, ()):
            if isinstance(b, (ast.With, ast.AsyncWith)):
                for item in b.items:
                    if rank_specific_path(ctx, item.context_expr, b, depth + 1):
                        return True
    return False
