from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..flow.mode_unbound import global_names, unbound_reads
from ._flow import text


class UnboundOnSingleProcess(Rule):
    """
    ## What it does
    Checks for a local name that is assigned only in the branch of an `if` that a single-process
    run does not take (`if world_size > 1:`, `if dist.is_initialized() and dist.get_world_size() > 1:`,
    `if args.distributed:`, `if "WORLD_SIZE" in os.environ:`, a helper of the file that returns
    such a test), with no `else` that assigns it, and then read after that `if` where a
    single-process run gets (`flow/mode_unbound.py`). The world size is followed by value flow
    (`dist.get_world_size()`, also `... if dist.is_initialized() else 1`, `WORLD_SIZE` from the
    environment) or read from a world-size name.

    A name that is also bound elsewhere in the function (before the `if`, in its other branch,
    by a loop, a `with`, an `except`, an import), declared `nonlocal`, deleted, or a parameter is
    left alone, as is a name declared `global` that the module also binds outside the function
    (one it binds nowhere else is reported: `NameError`). So is a read under a test on the
    distributed mode, the process group or the rank (the same condition in any spelling, or a
    test of a local against the constant it holds except where a distributed-only branch changes
    it: `cut = -1`, `if distributed: cut = meta.axis`, then `if cut != -1:`), a read
    in a `try` with handlers or in a nested function, a read after a test on the distributed mode
    that leaves (`if world_size == 1: return`), a read that no path from the branch a
    single-process run takes reaches (that branch ends in `return`, `raise`, `sys.exit()`, or an
    `if` both of whose branches leave: `else: print("single process"); return False`), and an
    `if` inside a loop or a `try`.

    ## Why is this bad?
    A single-process run (one GPU, a debugging session, CI) skips the assignment, and the read
    raises:

    ```
    UnboundLocalError: cannot access local variable 'sampler' where it is not associated with a value
    ```

    (`NameError` at module level). The distributed launch works, so the bug surfaces only when
    somebody runs the script the simple way.

    ## Example
    ```python
    def build_loader(dataset, batch_size):
        if dist.is_initialized() and dist.get_world_size() > 1:
            sampler = DistributedSampler(dataset)
        return DataLoader(dataset, batch_size=batch_size, sampler=sampler, shuffle=sampler is None)
    ```

    ## Use instead
    ```python
    def build_loader(dataset, batch_size):
        sampler = None
        if dist.is_initialized() and dist.get_world_size() > 1:
            sampler = DistributedSampler(dataset)
        return DataLoader(dataset, batch_size=batch_size, sampler=sampler, shuffle=sampler is None)
    ```

    ## Fix safety
    No fix is offered: the value the single-process run needs (`None`, a plain sampler, a default)
    is the program's choice.
    """

    code = "DDP013"
    name = "unbound-on-single-process"
    severity = Severity.ERROR
    fix_availability = "never"
    requires_text = ("world_size", "WORLD_SIZE", "is_initialized", "distributed", "ddp", "DDP", "multi_gpu",
                     "ngpus", "n_gpus", "num_gpus", "nprocs", "num_processes")

    def finish(self, ctx) -> None:
        from ..flow import for_context

        sem = ctx.sem
        hub = for_context(ctx)
        scopes = [sem.tree, *(fn for fns in sem.functions.values() for fn in fns)]
        for scope in scopes:
            for name, owner, read in unbound_reads(ctx, scope, hub):
                err = "NameError" if isinstance(scope, ast.Module) or name in global_names(scope) \
                    else "UnboundLocalError"
                ctx.report(
                    read,
                    f"`{name}` is assigned only when `{text(ctx, owner.test)}` (line {owner.lineno}) holds, which a "
                    f"single-process run does not take, and there is no `else` that assigns it: a single-process "
                    f"run reads it here and fails with {err}. Assign a default before the `if` (or in an `else`)",
                    related=[(owner, "the only branch that assigns it")],
                )
