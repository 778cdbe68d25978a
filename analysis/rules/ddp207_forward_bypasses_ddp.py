from __future__ import annotations

import ast

from ..model import Applicability, Severity
from ..registry import Rule
from ._training import backward_calls, ddp_holder, enclosing_function, flows_to, grad_disabled


class ForwardBypassesDdp(Rule):
    """
    ## What it does
    Checks for a training forward pass that goes through the wrapped module instead of the
    `DistributedDataParallel` wrapper: `ddp_model.module(x)` or `ddp_model.module.forward(x)`, whose
    result reaches a `backward()` in the same function.

    The wrapper must be provably the DDP object (`ddp_model = DDP(...)` or `self.model = DDP(...)`
    assigned once). A forward under `torch.no_grad()` / `torch.inference_mode()` (evaluation), or
    whose result never reaches a `backward()`, is not flagged.

    ## Why is this bad?
    `DistributedDataParallel.forward` is where DDP arms its reducer
    (`reducer.prepare_for_backward(...)`) and, with `broadcast_buffers=True`, syncs the buffers.
    Calling `.module` skips it: the backward hooks find nothing to reduce, so **the gradients are
    never all-reduced**. Each rank steps on its own gradients and the replicas silently drift
    apart; there is no error, only a model that trains worse (or differently on every rank).

    ## Example
    ```python
    ddp_model = DDP(model, device_ids=[local_rank])
    for x, y in loader:
        loss = loss_fn(ddp_model.module(x), y)
        loss.backward()  # gradients stay local
        optimizer.step()
    ```

    ## Use instead
    ```python
    ddp_model = DDP(model, device_ids=[local_rank])
    for x, y in loader:
        loss = loss_fn(ddp_model(x), y)
        loss.backward()
        optimizer.step()
    ```

    ## Fix safety
    The fix calls the wrapper instead (`ddp_model(x)`). It is **unsafe**: gradients start being
    synchronised, which is the point, but DDP's forward also checks that every parameter takes part
    in the loss, so a model with unused parameters then needs `find_unused_parameters=True`.
    """

    code = "DDP207"
    name = "forward-bypasses-ddp"
    severity = Severity.ERROR
    fix_availability = "sometimes"
    requires_text = (".module",)

    def finish(self, ctx) -> None:
        for c in ctx.sem.calls:
            f = c.func
            if not isinstance(f, ast.Attribute):
                continue
            if f.attr == "module":
                holder = f.value
            elif f.attr == "forward" and isinstance(f.value, ast.Attribute) and f.value.attr == "module":
                holder = f.value.value
            else:
                continue
            if not isinstance(holder, (ast.Name, ast.Attribute)) or not ddp_holder(ctx, holder, c):
                continue
            if grad_disabled(ctx, c):
                continue
            fn = enclosing_function(c)
            if fn is None:
                continue
            back = next((b for b in backward_calls(ctx, fn) if b.lineno >= c.lineno and flows_to(ctx, c, b, fn)), None)
            if back is None:
                continue
            h = ctx.text(holder)
            fix = ctx.fix(Applicability.UNSAFE, f"Call the DDP wrapper: `{h}(...)`", [ctx.replace(f, h)])
            ctx.report(
                c,
                f"forward through `{ctx.text(f)}(...)` bypasses DistributedDataParallel: the `backward()` on "
                f"line {back.lineno} never all-reduces the gradients, so the ranks drift apart; call `{h}(...)`",
                related=[(back, "this backward does not synchronise gradients")],
                fix=fix,
            )
