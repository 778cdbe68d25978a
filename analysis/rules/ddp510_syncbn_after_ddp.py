from __future__ import annotations

from ..model import Severity
from ..registry import Rule
from ..semantic import get_arg
from ..flow.modern import DDP, FSDP1, holds_call, hub, qn_pred

_CONVERT = ("torch.nn.SyncBatchNorm.convert_sync_batchnorm",
            "torch.nn.modules.batchnorm.SyncBatchNorm.convert_sync_batchnorm")


class SyncBnAfterDdp(Rule):
    """
    ## What it does
    Checks for `nn.SyncBatchNorm.convert_sync_batchnorm(m)` where `m` is already wrapped in
    `DistributedDataParallel` (or FSDP1): the wrap may be in a helper, on `self`, or returned in a
    tuple, and either call may go through a name bound once to it
    (`convert = nn.SyncBatchNorm.convert_sync_batchnorm`). Only a wrap that reaches the conversion
    on some path counts: not one in the other branch of an `if`, nor one later in a loop whose
    iteration leaves (`return`, `break`) after wrapping.

    ## Why is this bad?
    `convert_sync_batchnorm` returns a *new* module tree with `SyncBatchNorm` layers in place of
    the BatchNorm ones. Converted after the wrap, the new layers are not the ones DDP registered:
    their parameters were not broadcast from rank 0, their gradients are not in DDP's buckets (DDP
    raises "Expected to have finished reduction" or the BatchNorm weights silently diverge), and
    the DDP wrapper still runs the old layers if the result is not the one trained.

    ## Example
    ```python
    model = DDP(model, device_ids=[rank])
    model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    ```

    ## Use instead
    ```python
    model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    model = DDP(model, device_ids=[rank])
    ```

    ## Fix safety
    There is no automatic fix: the two statements may be far apart.
    """

    code = "DDP510"
    name = "syncbn-after-ddp"
    severity = Severity.ERROR
    requires_text = ("convert_sync_batchnorm",)

    def finish(self, ctx) -> None:
        an, view = hub(ctx)
        pred = qn_pred(DDP, FSDP1)
        for c in ctx.calls_to(*_CONVERT):
            m = get_arg(c, 0, "module")
            if m is None:
                continue
            got = holds_call(an, view, m, c, pred)
            if got is not None:
                ctx.report(c, f"`{ctx.text(c)}` converts a module that is already wrapped: the new SyncBatchNorm "
                              "layers are not the ones the wrapper synchronises; convert before wrapping",
                           related=[(got[1], "wrapped here")] if got[0] is view else [])
