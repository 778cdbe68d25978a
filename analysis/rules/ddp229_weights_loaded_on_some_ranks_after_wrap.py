from __future__ import annotations

import ast

from ..flow import for_context
from ..flow.weight_writes import broadcast_after, callee_writes, main_only, weight_writes
from ..flow.freezes import wrapper_of
from ..flow.wrapped import wrap_origins
from ..model import Severity
from ..registry import Rule
from ..torch_api import DDP_CLASS
from ._flow import scopes

_MAX_WRAPS = 8


class WeightsLoadedOnSomeRanksAfterWrap(Rule):
    """
    ## What it does
    Checks for parameters of a model overwritten on the main rank only after the model was wrapped
    in `DistributedDataParallel`: a `load_state_dict`, a `torch.nn.init` function, or a `copy_`
    into its parameters (`for p in model.parameters(): p.data.copy_(...)`) that runs under a
    main-rank test (`if rank == 0:`, an early `return` off the main rank, a project helper such as
    `is_main_process()`, or a test of a value that only the main rank holds: `if ckpt:` /
    `if ckpt is not None:` where `ckpt = latest(run_dir)` and `run_dir = get_run_dir(cfg)`, project
    functions of any module that return None on every other rank, through an early
    `if not is_main(): return None` or an early `return None` when their parameter is None), on the
    wrapper, on the module read out of it (`ddp.module.backbone`,
    `unwrap(ddp).backbone` through a helper that returns `.module`) or on a name bound to one.

    The wrap is found by value flow (`wrapped.wrap_origins`): the `DDP(...)` the expression holds
    where the write runs, built in this function or returned by a project helper. A call, made
    after the wrap, of a project function (in this file or another module) that writes into the
    module its parameter holds is reported at the call when the write runs on the main rank only
    inside the function, or the call itself does (the wrap then being a `DDP(...)` of the calling
    function). Nothing is reported when a broadcast follows
    the write (`dist.broadcast` of the parameters, `broadcast_object_list`, a project helper that
    runs one), when the write happens before the wrap, or when every rank runs it.

    ## Why is this bad?
    The `DistributedDataParallel` constructor broadcasts rank 0's parameters and buffers once, so
    every replica starts from the same weights. It never does so again: weights loaded afterwards
    on the main rank only stay on the main rank. The other replicas keep their own (random)
    initialisation, the averaged gradients are applied to different models, and the replicas
    never agree. Nothing fails; a checkpoint saved from rank 0 hides it.

    ## Example
    ```python
    model = DDP(model, device_ids=[local_rank])
    if dist.get_rank() == 0:
        model.module.backbone.load_state_dict(torch.load(path, map_location="cpu"))
    ```

    ## Use instead
    Load before wrapping (the constructor then broadcasts the main rank's weights), or load on
    every rank:
    ```python
    if dist.get_rank() == 0:
        model.backbone.load_state_dict(torch.load(path, map_location="cpu"))
    model = DDP(model, device_ids=[local_rank])
    ```

    ## Fix safety
    There is no automatic fix: whether to move the load before the wrap, load on every rank or
    broadcast the parameters afterwards depends on the program.

    """

    code = "DDP229"
    name = "weights-loaded-on-some-ranks-after-wrap"
    severity = Severity.ERROR
    fix_availability = "never"
    # the write itself (``load_state_dict``, ``torch.nn.init.*``, ``copy_``), or, for a call of a
    # project function that writes, the wrapper built in this file
    requires_text = ("load_state_dict", "nn.init", "copy_", "DistributedDataParallel")
    # a file that writes weights into a wrapper built by a project helper may never spell "torch"
    base_text = ("torch", "load_state_dict", "nn.init", "copy_")

    def finish(self, ctx) -> None:
        an = for_context(ctx)
        view = an.main
        reported: set = set()
        for sc in scopes(ctx):
            for node, module in weight_writes(view, sc):
                if not main_only(view, node, ctx) or broadcast_after(an, view, sc, node.lineno):
                    continue
                ddp = _wrapped(an, view, module, node)
                if ddp is None:
                    continue
                reported.add(node)
                ctx.report(
                    node,
                    f"the weights of `{ctx.text(module)}` are overwritten on the main rank only, after the model was "
                    f"wrapped in DistributedDataParallel ({_where(view, ddp)}): the constructor broadcast the "
                    "initial weights once and never does again, so the other replicas keep their own and "
                    "train a different model; load before wrapping, or on every rank",
                )
        for sc in scopes(ctx):
            if isinstance(sc, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self._calls(ctx, an, view, sc, reported)

    @staticmethod
    def _calls(ctx, an, view, sc, reported) -> None:
        # the wrap is a ``DDP(...)`` of this function (as DDP221's calls): the text gate's
        # "DistributedDataParallel" is then in this file
        if not any(ctx.sem.enclosing_function(d) is sc for d in ctx.sem.calls_to(DDP_CLASS)):
            return
        for call, _target in an.helper_calls(view, sc):
            guarded = None
            for arg, node, cv, inside in callee_writes(an, view, call):
                if node in reported:
                    continue
                if not inside:
                    if guarded is None:
                        guarded = main_only(view, call, ctx)
                    if not guarded:
                        continue
                fn = cv.sem.enclosing_function(node)
                if broadcast_after(an, cv, fn, node.lineno) or broadcast_after(an, view, sc, call.lineno):
                    continue
                ddp = _wrapped(an, view, arg, call)
                if ddp is None:
                    continue
                where = str(cv.path).replace(chr(92), "/").rsplit("/", 1)[-1] + f":{node.lineno}"
                ctx.report(
                    call,
                    f"this call overwrites the weights of `{ctx.text(arg)}` on the main rank only ({where}), after "
                    f"the model was wrapped in DistributedDataParallel ({_where(view, ddp)}): the constructor "
                    "broadcast the initial weights once and never does again, so the other replicas keep their "
                    "own and train a different model; call it before wrapping, or load on every rank",
                )
                break


def _wrapped(an, view, module, at):
    """(view, ``DDP(...)``) when every wrapper expression of ``module`` at ``at`` holds a DDP
    wrapper built before (every origin one); else None."""
    ws = wrapper_of(an, view, module, at)
    if not ws or len(ws) > _MAX_WRAPS:
        return None
    got = None
    for w, wat, _below in ws:
        found, every = wrap_origins(an, view, w, wat)
        if not found or not every:
            return None
        got = got or found[0]
    return got


def _where(view, ddp) -> str:
    v, c = ddp
    if v is view:
        return f"line {c.lineno}"
    return f"{str(v.path).replace(chr(92), '/').rsplit('/', 1)[-1]}:{c.lineno}"
