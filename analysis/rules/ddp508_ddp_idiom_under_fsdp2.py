from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import parent
from ..flow.hidden import is_fsdp2, shard_calls
from ..flow.modern import DDP, hub, shard_reach

_DDP_ONLY_ATTRS = {"module": "`.module` (FSDP2 modules are the model itself)",
                   "no_sync": "`no_sync()` (use `set_requires_gradient_sync(False)`)"}


class DdpIdiomUnderFsdp2(Rule):
    """
    ## What it does
    Checks for DDP-era idioms applied to a module given to `fully_shard`: `model.module`,
    `model.no_sync()`, and `isinstance(model, DistributedDataParallel)`. The module may reach
    the idiom through a helper's parameter or an attribute of `self`.

    ## Why is this bad?
    `fully_shard` does not wrap: it changes the class of the module in place (to
    `FSDP<Model>`), so there is no `.module` (an `AttributeError`, or a submodule of that name),
    no `no_sync()` (an `AttributeError`: FSDP2 spells it `set_requires_gradient_sync(False)`), and
    `isinstance(model, DistributedDataParallel)` is always false: the branch it guards (unwrapping
    before saving, skipping gradient sync) silently never runs.

    ## Example
    ```python
    fully_shard(model)
    with model.no_sync():
        loss.backward()
    ```

    ## Use instead
    ```python
    fully_shard(model)
    model.set_requires_gradient_sync(False)
    loss.backward()
    model.set_requires_gradient_sync(True)
    ```

    ## Fix safety
    There is no automatic fix: the replacement is not a context manager.
    """

    code = "DDP508"
    name = "ddp-idiom-under-fsdp2"
    severity = Severity.ERROR
    # the idiom is in the file (`.module`, `no_sync`, `isinstance(m, DistributedDataParallel)`); the
    # sharding may be in a module it imports
    requires_text = ("module", "no_sync", "DistributedDataParallel")
    reach = classmethod(shard_reach)

    def finish(self, ctx) -> None:
        an, view = hub(ctx)
        if not shard_calls(an, view):
            return
        for n in ast.walk(view.sem.tree):
            if isinstance(n, ast.Attribute) and n.attr in _DDP_ONLY_ATTRS and isinstance(n.ctx, ast.Load):
                if n.attr == "no_sync" and not isinstance(parent(n), ast.Call):
                    continue
                if is_fsdp2(an, view, n.value, n):
                    ctx.report(n, f"`{ctx.text(n)}`: {_DDP_ONLY_ATTRS[n.attr]} is DDP's; `{ctx.text(n.value)}` is "
                                  "a `fully_shard` module, which has none")
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "isinstance" and \
                    len(n.args) == 2:
                cls = n.args[1]
                classes = cls.elts if isinstance(cls, ast.Tuple) else [cls]
                if any(ctx.qn(x) == DDP for x in classes) and not any(
                        (ctx.qn(x) or "").startswith("torch.distributed.fsdp") for x in classes) and \
                        is_fsdp2(an, view, n.args[0], n):
                    ctx.report(n, f"`{ctx.text(n)}` is always false: `{ctx.text(n.args[0])}` is a `fully_shard` "
                                  "module (its class becomes `FSDP<Model>`, not DistributedDataParallel)")
