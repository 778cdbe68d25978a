from __future__ import annotations

from ..model import Severity
from ..registry import Rule
from ..flow.rank import rank_guard
from ..flow.modern import COMPILE, hub


class CompileOnSomeRanks(Rule):
    """
    ## What it does
    Checks for `torch.compile(...)` (or `module.compile()`) called only on some ranks: inside an
    `if` on the rank (`if rank == 0:`, `if is_main_process():`, its `else`, or after an early exit
    on the rank) in the function that builds the model.

    ## Why is this bad?
    A compiled module and an eager one run different programs. Under DDP and FSDP2 the compiled
    module's graph breaks and bucketing differ, so the ranks issue their gradient collectives in
    different sizes and orders: the job hangs or, worse, reduces mismatched buckets; under tensor
    parallelism the compiled ranks fuse the functional collectives the eager ones run one by one.
    The ranks also differ in numerics, so replicas drift apart.

    ## Example
    ```python
    if rank == 0:
        model = torch.compile(model)  # only rank 0 compiles
    model = DDP(model, device_ids=[rank])
    ```

    ## Use instead
    ```python
    model = DDP(model, device_ids=[rank])
    model = torch.compile(model)  # every rank
    ```

    ## Fix safety
    There is no automatic fix.
    """

    code = "DDP514"
    name = "compile-on-some-ranks"
    severity = Severity.ERROR
    requires_text = ("compile",)

    def finish(self, ctx) -> None:
        hub(ctx)
        for c in ctx.calls_to(COMPILE):
            g = rank_guard(ctx, c)
            if g is None:
                continue
            cond = ctx.text(g.if_node.test)
            where = {"body": f"only where `{cond}`", "orelse": f"only where `{cond}` is false"}.get(
                g.branch, f"only on the ranks that pass the early exit `if {cond}:`")
            ctx.report(c, f"`{ctx.text(c)}` runs {where}: the compiled ranks and the eager ones issue their "
                          "collectives differently, and their replicas drift apart",
                       related=[(g.if_node.test, "rank guard")])
