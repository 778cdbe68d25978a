from __future__ import annotations

import ast

from ..semantic import parent
from ..model import Severity
from ..registry import Rule
from ..flow.exclusive import exclusive
from ..flow.hidden import arg_calls
from ..flow.modern import PARALLELIZE, hub, key_of, shard_calls
from ..flow.unconditional import leaves_before

_AC = ("torch.distributed.algorithms._checkpoint.checkpoint_wrapper.apply_activation_checkpointing",
       "torch.distributed.algorithms._checkpoint.checkpoint_wrapper.checkpoint_wrapper")


def _wraps_in_place(ctx, c) -> bool:
    """``m = checkpoint_wrapper(m, ...)`` (or returned): a new module around the sharded one, which
    keeps its own FSDP hooks; no module of a parent is swapped for the wrapper."""
    if (ctx.qn(c) or "") != _AC[1]:
        return False
    p = parent(c)
    if isinstance(p, ast.Return):
        return True
    return isinstance(p, ast.Assign) and p.value is c and all(isinstance(t, ast.Name) for t in p.targets)


class ParallelismOrder(Rule):
    """
    ## What it does
    Checks the order in which a model goes through the parallelism transforms. The order that
    works is: tensor parallel (`parallelize_module`), activation checkpointing, `torch.compile`,
    then `fully_shard` (FSDP2). Flagged:
    - `parallelize_module(model, ...)` after `fully_shard(model)`;
    - activation checkpointing (`apply_activation_checkpointing` / `checkpoint_wrapper`) applied
      to a model after `fully_shard(model)`. A `checkpoint_wrapper(model)` whose result is bound to
      a plain name or returned (`model = checkpoint_wrapper(model, ...)`) is not flagged: it wraps
      the sharded module, hooks and all, and replaces no module that FSDP hooked.
    The sharding may run in a project helper that gives its parameter to `fully_shard`
    (`apply_fsdp(model, mesh)`). A `fully_shard` from which no path reaches the later transform
    is not an earlier one: `if special: return shard_special(model)` before the code for the
    other models, or a `fully_shard` in another arm of the same `if`/`elif` chain
    (`if plan == "fsdp": fully_shard(model)` / `elif plan == "fsdp_tp": apply_tp(model, tp);
    fully_shard(model)`).

    Not flagged: `DistributedDataParallel(torch.compile(model))`. It is slower than compiling the
    DDP module (no graph split at the buckets) but correct, and common (nanoGPT).

    ## Why is this bad?
    Each transform must see the module the previous one produced. Tensor parallelism after
    `fully_shard` re-distributes parameters that are already FSDP DTensors (an error on a mesh
    mismatch, or parameters that the FSDP group no longer tracks). Checkpoint wrappers inserted
    after `fully_shard` replace submodules that FSDP installed its hooks on: their parameters are
    no longer all-gathered before use.

    ## Example
    ```python
    fully_shard(model)
    parallelize_module(model, mesh["tp"], plan)
    ```

    ## Use instead
    ```python
    parallelize_module(model, mesh["tp"], plan)
    fully_shard(model, mesh=mesh["dp"])
    ```

    ## Fix safety
    There is no automatic fix: the statements between the transforms may depend on their order.
    """

    code = "DDP509"
    name = "parallelism-order"
    severity = Severity.ERROR
    requires_text = ("fully_shard",)

    def finish(self, ctx) -> None:
        an, view = hub(ctx)
        sem = view.sem
        shards = shard_calls(an, view)
        if shards:
            for qn, what, needle in ((PARALLELIZE, "tensor parallelism", "parallelize_module"),
                                     (_AC, "activation checkpointing", "checkpoint")):
                # the transform's call, or a project helper's that gives it its parameter
                for c, a in arg_calls(an, view, qn, 0, "module" if qn is PARALLELIZE else "model", needle):
                    k = key_of(a) if a is not None else None
                    if k is None or (qn is _AC and _wraps_in_place(ctx, c)):
                        continue
                    fn = sem.enclosing_function(c)
                    s = next((s for s, sa in shards if key_of(sa) == k and sem.enclosing_function(s) is fn
                              and s.lineno < c.lineno and not leaves_before(s, c)
                              and not exclusive(s, c, fn or sem.tree)), None)
                    if s is not None:
                        ctx.report(c, f"{what} is applied to `{k}` after `{ctx.text(s)}` (line {s.lineno}): "
                                      f"apply it before `fully_shard`",
                                   related=[(s, "sharded here")])
