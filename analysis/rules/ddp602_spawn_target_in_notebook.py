from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import get_arg
from ._common import const_str
from ..flow.kernel import in_notebook
from ._spawn import spawn_calls, target_def


class SpawnTargetInNotebook(Rule):
    """
    ## What it does
    Checks, in a notebook, for `torch.multiprocessing.spawn(fn, ...)` or `start_processes(fn, ...)`
    with the `spawn` start method (their default) whose `fn` is defined in the notebook: a
    function of a cell, a lambda, or a `functools.partial` of one.

    ## Why is this bad?
    The `spawn` start method starts each child in a fresh interpreter and sends it `fn` by
    pickling: by reference, as "function `train` of module `__main__`". A script's children
    import the script as their `__main__` and find it; a kernel's `__main__` has no file, so every
    child dies before it starts:

    ```
    AttributeError: Can't get attribute 'train' on <module '__main__' (built-in)>
    ```

    and `mp.spawn` reports `ProcessExitedException` for each rank.

    ## Example
    ```python
    # a notebook cell
    def train(rank, world_size):
        ...

    mp.spawn(train, args=(2,), nprocs=2)
    ```

    ## Use instead
    Put the function in a module next to the notebook and import it:

    ```python
    # train_ddp.py
    def train(rank, world_size):
        ...
    ```

    ```python
    # a notebook cell
    from train_ddp import train

    mp.spawn(train, args=(2,), nprocs=2)
    ```

    (or use Accelerate's `notebook_launcher`, which forks).

    ## Fix safety
    There is no fix: moving code into a new module is the author's call.
    """

    code = "DDP602"
    name = "spawn-target-in-notebook"
    severity = Severity.ERROR
    requires_text = ("spawn", "start_processes")
    requires_text_all = (("multiprocessing",),)

    def finish(self, ctx) -> None:
        if not in_notebook(ctx):
            return
        for call in spawn_calls(ctx):
            if const_str(get_arg(call, 5, "start_method"), ctx.sem) == "fork":
                continue  # forked children inherit the kernel's functions
            fn = get_arg(call, 0, "fn")
            if fn is None:
                continue
            if isinstance(fn, ast.Lambda):
                ctx.report(fn, "a lambda started with the `spawn` start method cannot be pickled to the "
                               "children; define the function in a module and import it")
                continue
            d, shown = target_def(ctx, call), None
            if d is not None:
                shown = fn
            elif isinstance(fn, ast.Call) and ctx.qn(fn) == "functools.partial":
                inner = get_arg(fn, 0, "func")
                if isinstance(inner, ast.Name):
                    defs = ctx.sem.functions.get(inner.id, ())
                    if len(defs) == 1 and isinstance(ctx.sem.scope_of(defs[0]), ast.Module):
                        d, shown = defs[0], inner
            if d is None:
                continue
            ctx.report(shown, f"`{d.name}` is defined in the notebook, but the `spawn` start method sends it to "
                              f"each child by reference to the kernel's `__main__`, which children cannot import "
                              f"(AttributeError: Can't get attribute '{d.name}' on <module '__main__'>); move "
                              f"`{d.name}` to a .py module and import it",
                       related=[(d, f"`{d.name}` defined here, line {d.lineno}")])
