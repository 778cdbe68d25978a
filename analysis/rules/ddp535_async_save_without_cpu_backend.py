from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import get_arg
from ..flow.modern import ASYNC_SAVE, hub


class AsyncSaveWithoutCpuBackend(Rule):
    """
    ## What it does
    Checks for a `torch.distributed.checkpoint.async_save(...)` on the default process group (no
    `process_group=`) in a program whose default group is NCCL-only: every `init_process_group`
    that the module, the project helpers it calls, or the modules that call it (two calls up) run
    names NCCL alone (`"nccl"`, `Backend.NCCL`, also through a constant, a default or a parameter
    every call passes as one). A `process_group=` built by `new_group(backend="nccl")` counts too.
    Left alone: a group made with `"cpu:gloo,cuda:nccl"` or without a backend (torch then makes
    both), a `process_group=` that may be a Gloo group, and a group a library makes (DeepSpeed,
    Accelerate), whose backend is not read.

    ## Why is this bad?
    `async_save` stages the state dict in CPU memory and runs the save's planning collectives on
    those CPU tensors, in a background thread or process. It requires the group to have a CPU
    backend and checks it first:

    ```
    AssertionError: A CPU backend must be enabled for async save; try initializing process group
    with 'cpu:gloo,cuda:nccl'
    ```

    The run dies at its first checkpoint, often hours in, with nothing saved. A run with
    synchronous saves (`dcp.save`) works, so the mistake shows up only when async checkpointing is
    switched on.

    ## Example
    ```python
    dist.init_process_group("nccl")
    ...
    future = dcp.async_save(state, checkpoint_id=path)
    ```

    ## Use instead
    ```python
    dist.init_process_group("cpu:gloo,cuda:nccl")
    ...
    future = dcp.async_save(state, checkpoint_id=path)
    ```

    or give the save a Gloo group of its own:

    ```python
    dist.init_process_group("nccl")
    ckpt_group = dist.new_group(backend="gloo")
    ...
    future = dcp.async_save(state, checkpoint_id=path, process_group=ckpt_group)
    ```

    ## Fix safety
    There is no fix: the backend is chosen where the group is made, often in another module, and a
    second backend changes what every CPU collective of the program does.
    """

    code = "DDP535"
    name = "async-save-without-cpu-backend"
    severity = Severity.ERROR
    requires_text = ("async_save",)

    @classmethod
    def reach(cls, text, filename):
        # the group made here, or the module is called by one of the project that may make it
        from ._common import callers_may_exist

        if "init_process_group" in text:
            return True, {}
        return callers_may_exist(text, filename, ())

    def finish(self, ctx) -> None:
        from ..flow.device_sync import default_nccl_only
        from ..flow.epoch_targets import caller_views
        from ._common import other_call_sites

        an, view = hub(ctx)
        callers = None
        for call in ctx.calls_to(*ASYNC_SAVE):
            if get_arg(call, None, "no_dist") is not None and not _false(get_arg(call, None, "no_dist")):
                continue  # a one-process save: no group is asked
            pg = get_arg(call, None, "process_group")
            if pg is not None and not (isinstance(pg, ast.Constant) and pg.value is None):
                if not _nccl_group(an, view, pg, call):
                    continue
                ctx.report(call, "`async_save` runs its collectives on CPU tensors, and the `process_group` it is "
                                 "given is an NCCL group: AssertionError: A CPU backend must be enabled for async "
                                 "save. Give it a Gloo group (`dist.new_group(backend=\"gloo\")`)")
                continue
            if callers is None:
                callers = other_call_sites(ctx, an, methods=True)
            views = (view, *caller_views(an, view, call, callers))
            inits = default_nccl_only(an, views)
            if inits is None:
                continue
            iv, init = inits[0]
            related = [(init, "the default group is made NCCL-only here")] if iv is view else [
                ("file", iv.path, _range(iv, init), "the default group is made NCCL-only here")]
            ctx.report(
                call,
                "`async_save` on the default process group, which is NCCL-only: async saves run their "
                "collectives on CPU tensors and raise AssertionError: A CPU backend must be enabled for async "
                "save. Make the group with `\"cpu:gloo,cuda:nccl\"` or pass a Gloo `process_group=`",
                related=related,
            )


def _false(e) -> bool:
    return isinstance(e, ast.Constant) and e.value is False


def _nccl_group(an, view, pg, at) -> bool:
    """Every value ``pg`` may hold is a ``new_group(...)`` whose backend is NCCL alone."""
    from ..flow.device_sync import _nccl_expr
    from ..flow.origins import origins

    got = origins(an, view, pg, at)
    return bool(got) and all(
        isinstance(e, ast.Call) and (v.sem.call_qualname(e) or "") == "torch.distributed.new_group"
        and _nccl_expr(an, v, get_arg(e, 2, "backend"), e) for v, e in got)


def _range(view, node):
    from ..source import SourceText

    return SourceText(view.text).node_range(node)
