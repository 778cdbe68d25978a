from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import get_arg, parent
from ._common import const_str
from ..flow.kernel import in_notebook
from ._spawn import spawn_calls, under_main_guard

_START_METHOD = ("torch.multiprocessing.set_start_method", "multiprocessing.set_start_method",
                 "torch.multiprocessing.get_context", "multiprocessing.get_context")


class SpawnWithoutMainGuard(Rule):
    """
    ## What it does
    Checks for `torch.multiprocessing.spawn(...)` (or `start_processes`) that runs when the module
    is imported: at module level, or in a function called at module level, without an
    `if __name__ == "__main__":` guard. `init_process_group` at module level is flagged too when
    the file also starts processes with the `spawn`/`forkserver` start method (`mp.spawn`,
    `set_start_method("spawn")`, `DataLoader(..., multiprocessing_context="spawn")`). Under torchrun
    alone a module-level `init_process_group` is fine: nothing re-imports the script.

    ## Why is this bad?
    `mp.spawn` always uses the `spawn` start method: each child starts a fresh interpreter and
    *imports the main module* to find the target function. Without the guard, that import runs
    the module-level `mp.spawn` again, inside the child, and Python stops it:

    ```
    RuntimeError:
            An attempt has been made to start a new process before the
            current process has finished its bootstrapping phase.
            ...
            if __name__ == '__main__':
                freeze_support()
    ```

    (a module-level `init_process_group` re-runs in every child the same way, and hangs waiting
    for ranks that never come).

    ## Example
    ```python
    def main(rank, world_size):
        ...

    mp.spawn(main, args=(2,), nprocs=2)
    ```

    ## Use instead
    ```python
    def main(rank, world_size):
        ...

    if __name__ == "__main__":
        mp.spawn(main, args=(2,), nprocs=2)
    ```

    In a notebook the kernel's `__main__` has no file, so nothing re-imports it: this rule is
    silent there (DDP602 covers what does go wrong).

    ## Fix safety
    There is no fix: what belongs under the guard (argument parsing, set-up) is the author's call.
    """

    code = "DDP403"
    name = "spawn-without-main-guard"
    severity = Severity.ERROR
    requires_text = ("spawn", "start_processes", "init_process_group")
    requires_text_all = (("multiprocessing", "distributed"),)  # torch.multiprocessing.* or torch.distributed.*

    def finish(self, ctx) -> None:
        if in_notebook(ctx):
            return  # a kernel's __main__ has no file: children never re-import it (DDP602's matter)
        for call in spawn_calls(ctx):
            sm = const_str(get_arg(call, 5, "start_method"))
            if sm == "fork":
                continue
            self._check(ctx, call, "`mp.spawn`")
        if _spawns_fresh_interpreters(ctx):
            for call in ctx.dist_calls("init_process_group"):
                self._check(ctx, call, "`init_process_group`")

    def _check(self, ctx, call: ast.Call, what: str) -> None:
        if under_main_guard(call):
            return
        fn = ctx.sem.enclosing_function(call)
        if fn is None:
            if isinstance(ctx.sem.scope_of(call), ast.Module):
                ctx.report(call, f"{what} runs at import time, outside `if __name__ == \"__main__\":`; every spawned "
                                 "child re-imports this module and runs it again (RuntimeError: bootstrapping phase)")
            return
        if not isinstance(parent(fn), ast.Module):
            return  # a nested function or a method: leave it
        # the module-level functions that run ``fn`` (directly or through others of this file),
        # up to one called at module level outside the guard
        seen, todo = {fn.name}, [fn.name]
        for _ in range(4):
            nxt = []
            for name in todo:
                for c in ctx.sem.calls:
                    if not (isinstance(c.func, ast.Name) and c.func.id == name):
                        continue
                    outer = ctx.sem.enclosing_function(c)
                    if outer is None:
                        if isinstance(ctx.sem.scope_of(c), ast.Module) and not under_main_guard(c):
                            ctx.report(call, f"{what} runs at import time through `{name}()`, called at module "
                                             "level outside `if __name__ == \"__main__\":`; every spawned child "
                                             "re-imports this module and runs it again (RuntimeError: bootstrapping "
                                             "phase)",
                                       related=[(c, f"`{name}()` called at module level")])
                            return
                    elif isinstance(parent(outer), ast.Module) and outer.name not in seen \
                            and not under_main_guard(c):
                        seen.add(outer.name)
                        nxt.append(outer.name)
            todo = nxt
            if not todo:
                return


def _spawns_fresh_interpreters(ctx) -> bool:
    for c in ctx.calls_to(*_START_METHOD):
        if const_str(get_arg(c, 0, "method"), ctx.sem) in ("spawn", "forkserver"):
            return True
    for c in ctx.calls_to("torch.utils.data.DataLoader"):
        if const_str(get_arg(c, None, "multiprocessing_context"), ctx.sem) in ("spawn", "forkserver"):
            return True  # every worker re-imports the main module
    # a plain ``multiprocessing.Process`` forks on Linux (no re-import): only explicit spawn counts
    return bool(spawn_calls(ctx))
