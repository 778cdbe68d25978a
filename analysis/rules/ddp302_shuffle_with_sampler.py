from __future__ import annotations

import ast

from ..model import Applicability, Severity
from ..registry import Rule
from ._common import is_simple_ref
from ._loader import dataloaders, is_true, may_be_none, remove_keyword, sampler_args


class ShuffleWithSampler(Rule):
    """
    ## What it does
    Checks for `DataLoader(..., shuffle=True, sampler=...)` (or `batch_sampler=...`) with a sampler
    that is not `None`.

    ## Why is this bad?
    A sampler decides the order itself, so the DataLoader refuses the combination at construction:

    ```
    ValueError: sampler option is mutually exclusive with shuffle
    ```

    (`batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and drop_last`
    for a batch sampler). With a `DistributedSampler`, shuffling is the sampler's job:
    `DistributedSampler(dataset, shuffle=True)` is the default.

    ## Example
    ```python
    sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, batch_size=32, shuffle=True, sampler=sampler)
    ```

    ## Use instead
    ```python
    sampler = DistributedSampler(dataset)  # shuffles by default
    loader = DataLoader(dataset, batch_size=32, sampler=sampler)
    ```

    ## Fix safety
    When the sampler is never `None`, the fix drops `shuffle=True`; when it may be `None` (a
    variable set to a sampler only in distributed runs), it writes `shuffle=(sampler is None)`.
    Both are **safe**: the call raised before, and the non-distributed path keeps shuffling.
    """

    code = "DDP302"
    name = "shuffle-with-sampler"
    severity = Severity.ERROR
    fix_availability = "sometimes"
    requires_text = ("shuffle",)
    requires_text_all = (("DataLoader",),)  # torch.utils.data.DataLoader calls

    def finish(self, ctx) -> None:
        for call in dataloaders(ctx):
            kw = next((k for k in call.keywords if k.arg == "shuffle"), None)
            if kw is None or not is_true(kw.value):
                continue
            samplers = sampler_args(call)
            if not samplers:
                continue
            s = samplers[0]
            which = "batch_sampler" if any(k.arg == "batch_sampler" and k.value is s for k in call.keywords) else "sampler"
            fix = None
            if not may_be_none(ctx, s, call):
                fix = ctx.fix(Applicability.SAFE, "Remove `shuffle=True` (the sampler decides the order)",
                              [remove_keyword(ctx, call, kw)])
            elif isinstance(s, ast.Name) or (is_simple_ref(s) and not isinstance(s, ast.Subscript)):
                new = f"({ctx.text(s)} is None)"
                fix = ctx.fix(Applicability.SAFE, f"Shuffle only without a sampler: `shuffle={new}`",
                              [ctx.replace(kw.value, new)])
            ctx.report(
                kw,
                f"`shuffle=True` with `{which}=`: DataLoader raises ValueError (mutually exclusive); "
                "the sampler does the shuffling",
                fix=fix,
            )
