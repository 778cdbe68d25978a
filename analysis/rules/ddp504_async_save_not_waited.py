from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import parent
from ..flow.modern import ASYNC_SAVE, hub, key_of, uses_after
from ..flow.origins import helper_results, qn_pred

_WAITS = ("result", "done", "wait", "exception", "add_done_callback")


class AsyncSaveNotWaited(Rule):
    """
    ## What it does
    Checks for a `torch.distributed.checkpoint.async_save(...)` whose future is dropped (the call
    is a statement of its own, or its result is bound to a name nobody reads), and for an
    `async_save` in a loop whose previous future is not waited (`.result()`) before the next one
    starts. A future kept on `self` and waited in any method of the class counts as waited.

    ## Why is this bad?
    `async_save` stages the state dict and returns at once; the write, and the collectives that
    commit the checkpoint, run in a background thread. A dropped future hides every error of the
    save (the checkpoint is silently missing or partial), and the process may exit before the
    write ends. Two saves in flight compete for the same staging memory and the same process
    group: the second one's collectives can interleave with the first one's, and ranks that see
    them in another order hang.

    ## Example
    ```python
    for step in range(steps):
        train_step()
        if step % 100 == 0:
            dcp.async_save(state, checkpoint_id=f"ckpt/{step}")
    ```

    ## Use instead
    ```python
    future = None
    for step in range(steps):
        train_step()
        if step % 100 == 0:
            if future is not None:
                future.result()  # the previous save is done
            future = dcp.async_save(state, checkpoint_id=f"ckpt/{step}")
    future.result()
    ```

    ## Fix safety
    There is no automatic fix: where to wait depends on the training loop.
    """

    code = "DDP504"
    name = "async-save-not-waited"
    severity = Severity.ERROR
    requires_text = ("async_save",)

    def finish(self, ctx) -> None:
        an, view = hub(ctx)
        sem = view.sem
        # the ``async_save`` calls, and the calls of project helpers that return their future
        helpers = [c for c, _ in helper_results(an, view, qn_pred(*ASYNC_SAVE))]
        for c in [*ctx.calls_to(*ASYNC_SAVE), *helpers]:
            p = parent(c)
            if isinstance(p, ast.Await):
                p = parent(p)
            if isinstance(p, ast.Expr):
                ctx.report(c, f"the future of `{ctx.text(c)}` is dropped: the save's errors are never seen, "
                              "and nothing waits for it before the next save or the end of the process")
                continue
            if not (isinstance(p, ast.Assign) and len(p.targets) == 1):
                continue
            k = key_of(p.targets[0])
            if k is None:
                continue
            uses = uses_after(sem, k, p)
            if not uses:
                ctx.report(c, f"the future of `{ctx.text(c)}` is bound to `{k}`, which nothing reads: the save's "
                              "errors are never seen, and nothing waits for it")
                continue
            loop = _loop_of(p)
            if loop is None or k.startswith("self."):
                continue
            waited = [u for u in uses if _waited(u)]
            if not any(_inside(loop, u) for u in waited) and not any(
                    not _inside(loop, u) or u.lineno < p.lineno for u in uses if not _waited(u)):
                ctx.report(c, f"`{ctx.text(c)}` runs in a loop and `{k}` is not waited in it: the next "
                              "iteration starts a second `async_save` while this one is in flight",
                           related=[(loop, "the loop")])


def _waited(use) -> bool:
    p = parent(use)
    return isinstance(p, ast.Attribute) and p.attr in _WAITS


def _loop_of(node):
    p = parent(node)
    while p is not None and not isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)):
        if isinstance(p, (ast.For, ast.While, ast.AsyncFor)):
            return p
        p = parent(p)
    return None


def _inside(outer, inner) -> bool:
    return (outer.lineno, outer.col_offset) <= (inner.lineno, inner.col_offset) and (
        inner.end_lineno, inner.end_col_offset) <= (outer.end_lineno, outer.end_col_offset)
